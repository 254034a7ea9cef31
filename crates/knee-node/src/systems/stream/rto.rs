//! The retransmission timeout of RFC 6298, kept per service when the client adapts its
//! timeout: SRTT and RTTVAR from round-trip samples, RTO = SRTT + max(G, K * RTTVAR),
//! doubled on each timeout (backoff). Samples from retransmitted requests are not taken
//! (Karn's rule; the caller only feeds first-attempt round trips).

const ALPHA: f64 = 1.0 / 8.0;
const BETA: f64 = 1.0 / 4.0;
const K: f64 = 4.0;
/// Clock granularity G: the client's clock reads ns; 1 us keeps the variance term meaningful.
const G_NS: f64 = 1_000.0;

#[derive(Clone, Debug)]
pub struct Rto {
    srtt_ns: Option<f64>,
    rttvar_ns: f64,
    rto_ns: f64,
    min_ns: f64,
    max_ns: f64,
}

impl Rto {
    /// RFC 6298 (2.1): RTO starts at `initial_ns` before any sample; it stays in [min, max]
    /// (the RFC's 1 s minimum suits the Internet; an emulated link of a few ms needs less).
    pub fn new(initial_ns: f64, min_ns: f64, max_ns: f64) -> Self {
        Rto {
            srtt_ns: None,
            rttvar_ns: 0.0,
            rto_ns: initial_ns.clamp(min_ns, max_ns),
            min_ns,
            max_ns,
        }
    }

    pub fn rto_ns(&self) -> u64 {
        self.rto_ns as u64
    }

    #[cfg(test)]
    pub fn srtt_ns(&self) -> Option<f64> {
        self.srtt_ns
    }

    /// A round trip R of a request sent once (2.2 for the first, 2.3 after).
    pub fn sample(&mut self, rtt_ns: f64) {
        let srtt = match self.srtt_ns {
            None => {
                self.rttvar_ns = rtt_ns / 2.0;
                rtt_ns
            }
            Some(srtt) => {
                // RTTVAR first, with the old SRTT, as the RFC orders it.
                self.rttvar_ns = (1.0 - BETA) * self.rttvar_ns + BETA * (srtt - rtt_ns).abs();
                (1.0 - ALPHA) * srtt + ALPHA * rtt_ns
            }
        };
        self.srtt_ns = Some(srtt);
        self.rto_ns = (srtt + G_NS.max(K * self.rttvar_ns)).clamp(self.min_ns, self.max_ns);
    }

    /// The timer expired (5.5): back off, RTO = RTO * 2, up to the maximum.
    pub fn back_off(&mut self) {
        self.rto_ns = (self.rto_ns * 2.0).min(self.max_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: f64 = 1e6;

    #[test]
    fn first_sample_sets_srtt_and_half_rttvar() {
        let mut r = Rto::new(1000.0 * MS, 1.0 * MS, 60_000.0 * MS);
        assert_eq!(r.rto_ns(), (1000.0 * MS) as u64, "initial RTO before any sample");
        r.sample(100.0 * MS);
        // SRTT = R = 100, RTTVAR = R/2 = 50, RTO = 100 + 4 * 50 = 300 ms.
        assert_eq!(r.srtt_ns(), Some(100.0 * MS));
        assert_eq!(r.rto_ns(), (300.0 * MS) as u64);
    }

    #[test]
    fn later_samples_follow_the_rfc_formulas() {
        let mut r = Rto::new(1000.0 * MS, 1.0 * MS, 60_000.0 * MS);
        r.sample(100.0 * MS);
        r.sample(200.0 * MS);
        // RTTVAR = 3/4 * 50 + 1/4 * |100 - 200| = 62.5; SRTT = 7/8 * 100 + 1/8 * 200 = 112.5
        // RTO = 112.5 + 4 * 62.5 = 362.5 ms.
        assert!((r.srtt_ns().unwrap_or(0.0) - 112.5 * MS).abs() < 1.0);
        assert_eq!(r.rto_ns(), (362.5 * MS) as u64);
        // A steady RTT drives RTTVAR towards 0: RTO approaches SRTT + G.
        for _ in 0..500 {
            r.sample(100.0 * MS);
        }
        let rto_ms = r.rto_ns() as f64 / MS;
        assert!((rto_ms - 100.0).abs() < 0.1, "rto {rto_ms}");
    }

    #[test]
    fn backoff_doubles_within_bounds_and_a_sample_recomputes() {
        let mut r = Rto::new(1000.0 * MS, 50.0 * MS, 3000.0 * MS);
        r.sample(10.0 * MS);
        // 10 + 4 * 5 = 30 ms is below the 50 ms minimum.
        assert_eq!(r.rto_ns(), (50.0 * MS) as u64);
        r.back_off();
        assert_eq!(r.rto_ns(), (100.0 * MS) as u64);
        for _ in 0..10 {
            r.back_off();
        }
        assert_eq!(r.rto_ns(), (3000.0 * MS) as u64, "capped at the maximum");
        r.sample(10.0 * MS);
        assert!(r.rto_ns() < (100.0 * MS) as u64, "a new sample ends the backoff");
    }
}
