//! Open-loop schedules: when each request is meant to leave, as ns offsets from the start.

use super::config::ScheduleConfig;
use crate::rng::Rng;

pub enum Schedule {
    Poisson {
        mean_gap_ns: f64,
        at_ns: f64,
    },
    Constant {
        gap_ns: f64,
        index: u64,
    },
    Steps {
        steps: Vec<(f64, f64)>,
        step: usize,
        step_start_ns: f64,
        at_ns: f64,
    },
}

impl Schedule {
    /// `None` for the closed loop, which has no schedule.
    pub fn new(cfg: &ScheduleConfig) -> Option<Schedule> {
        Some(match cfg {
            ScheduleConfig::Poisson { rate_per_s } => Schedule::Poisson {
                mean_gap_ns: 1e9 / rate_per_s,
                at_ns: 0.0,
            },
            ScheduleConfig::Constant { rate_per_s } => Schedule::Constant {
                gap_ns: 1e9 / rate_per_s,
                index: 0,
            },
            ScheduleConfig::Steps { steps } => Schedule::Steps {
                steps: steps.clone(),
                step: 0,
                step_start_ns: 0.0,
                at_ns: 0.0,
            },
            ScheduleConfig::Closed { .. } => return None,
        })
    }

    /// The next intended send offset in ns, or `None` when the schedule is over.
    pub fn next_offset_ns(&mut self, rng: &mut Rng) -> Option<u64> {
        match self {
            Schedule::Poisson { mean_gap_ns, at_ns } => {
                *at_ns += rng.exponential(*mean_gap_ns);
                Some(*at_ns as u64)
            }
            Schedule::Constant { gap_ns, index } => {
                let at = *index as f64 * *gap_ns;
                *index += 1;
                Some(at as u64)
            }
            Schedule::Steps {
                steps,
                step,
                step_start_ns,
                at_ns,
            } => loop {
                let (rate_per_s, duration_s) = *steps.get(*step)?;
                let step_end_ns = *step_start_ns + duration_s * 1e9;
                let next = *at_ns + rng.exponential(1e9 / rate_per_s);
                if next < step_end_ns {
                    *at_ns = next;
                    return Some(next as u64);
                }
                // Memorylessness: restarting the draw at the step boundary keeps each step Poisson.
                *step += 1;
                *step_start_ns = step_end_ns;
                *at_ns = step_end_ns;
            },
        }
    }

    /// The target rate at an offset, for progress lines.
    pub fn rate_at(&self, offset_ns: u64) -> f64 {
        match self {
            Schedule::Poisson { mean_gap_ns, .. } => 1e9 / mean_gap_ns,
            Schedule::Constant { gap_ns, .. } => 1e9 / gap_ns,
            Schedule::Steps { steps, .. } => {
                let mut end_s = 0.0;
                for (rate, duration_s) in steps {
                    end_s += duration_s;
                    if (offset_ns as f64) < end_s * 1e9 {
                        return *rate;
                    }
                }
                0.0
            }
        }
    }

    /// Total length of a schedule that ends by itself (steps), in seconds.
    pub fn length_s(&self) -> Option<f64> {
        match self {
            Schedule::Steps { steps, .. } => Some(steps.iter().map(|s| s.1).sum()),
            _ => None,
        }
    }
}

/// Longest wait of an engine's poll, so stop requests, the end of the grace, timeouts and
/// think times are noticed.
pub const IDLE_WAIT_NS: u64 = 20_000_000;
/// Within this of the next send, an open loop polls without sleeping: a sleep can end late.
const SPIN_NS: u64 = 50_000;
/// For this long after a send, poll without sleeping too: on loopback most replies arrive
/// within it, and a thread woken from sleep would add its own wake-up time to the latency.
const SPIN_AFTER_SEND_NS: u64 = 50_000;

/// How long an open loop may wait for replies at `now_ns`, its next send due at `due_ns`
/// (None: no more sends): not at all just after a send while replies are awaited, else until
/// just before the next send, and never beyond `IDLE_WAIT_NS`.
pub fn pace_wait_ns(now_ns: u64, due_ns: Option<u64>, awaiting: bool, last_sent_ns: u64) -> u64 {
    if awaiting && now_ns < last_sent_ns + SPIN_AFTER_SEND_NS {
        return 0;
    }
    match due_ns {
        Some(t) => t.saturating_sub(now_ns).saturating_sub(SPIN_NS),
        None => IDLE_WAIT_NS,
    }
    .min(IDLE_WAIT_NS)
}

/// An open loop's send times: its schedule and the schedule's own random draws, seeded apart
/// from the request choices so that a driver's draws never shift the send times.
pub struct Pacer {
    schedule: Schedule,
    rng: Rng,
}

impl Pacer {
    /// `None` for the closed loop, which has no schedule.
    pub fn new(cfg: &ScheduleConfig, seed: u64) -> Option<Pacer> {
        Some(Pacer {
            schedule: Schedule::new(cfg)?,
            rng: Rng::new(seed ^ 0x5EED_5C4E_D01E),
        })
    }

    /// The next intended send offset in ns, or `None` when the schedule is over.
    pub fn next_offset_ns(&mut self) -> Option<u64> {
        self.schedule.next_offset_ns(&mut self.rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_loop_spins_after_a_send_and_sleeps_until_just_before_the_next() {
        assert_eq!(pace_wait_ns(1_000, Some(10_000_000), true, 1_000), 0);
        assert_eq!(
            pace_wait_ns(1_000, Some(10_000_000), false, 1_000),
            10_000_000 - 1_000 - SPIN_NS
        );
        assert_eq!(
            pace_wait_ns(SPIN_AFTER_SEND_NS, Some(u64::MAX), true, 0),
            IDLE_WAIT_NS
        );
        assert_eq!(pace_wait_ns(0, None, false, 0), IDLE_WAIT_NS);
        assert_eq!(pace_wait_ns(5, Some(5), false, 0), 0, "due now: no wait");
    }

    #[test]
    fn constant_is_evenly_spaced() {
        let mut s = Schedule::new(&ScheduleConfig::Constant { rate_per_s: 1000.0 }).unwrap();
        let mut rng = Rng::new(1);
        let t: Vec<u64> = (0..4).map(|_| s.next_offset_ns(&mut rng).unwrap()).collect();
        assert_eq!(t, vec![0, 1_000_000, 2_000_000, 3_000_000]);
    }

    #[test]
    fn steps_follow_their_rates_and_end() {
        let cfg = ScheduleConfig::Steps {
            steps: vec![(1000.0, 1.0), (4000.0, 0.5)],
        };
        let mut s = Schedule::new(&cfg).unwrap();
        let mut rng = Rng::new(2);
        let mut offsets = Vec::new();
        while let Some(t) = s.next_offset_ns(&mut rng) {
            offsets.push(t);
        }
        let first = offsets.iter().filter(|&&t| t < 1_000_000_000).count();
        let second = offsets.len() - first;
        assert!((900..1100).contains(&first), "{first}");
        assert!((1800..2200).contains(&second), "{second}");
        assert!(*offsets.last().unwrap() < 1_500_000_000);
        assert_eq!(s.rate_at(1_200_000_000), 4000.0);
    }
}
