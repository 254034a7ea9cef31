//! Link emulation inside a block service: a delay distribution and a loss process, drawn
//! from the service's own seeded generator so a run is reproducible from its spec.

use serde::Deserialize;

use crate::rng::Rng;

/// Longest emulated delay: a reply never waits longer than this in the timer queue.
pub const MAX_DELAY_MS: f64 = 60_000.0;
/// Largest lognormal sigma: at 3, the p99 is already ~1,000 x the median.
pub const MAX_SPREAD: f64 = 3.0;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Delay {
    Fixed {
        ms: f64,
    },
    Uniform {
        min_ms: f64,
        max_ms: f64,
    },
    /// exp(N(ln median, spread^2)): `spread` is the sigma of the log (0.5 gives a p99 ~3.2 x
    /// the median).
    Lognormal {
        median_ms: f64,
        spread: f64,
    },
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Loss {
    None,
    /// Each request lost independently with probability p.
    Bernoulli {
        p: f64,
    },
    /// Two states: good (loss probability `loss_good`) and bad (`loss_bad`); after each
    /// request the chain moves good -> bad with `p_good_bad` and bad -> good with
    /// `p_bad_good`. Losses come in bursts of mean length ~1 / p_bad_good.
    GilbertElliott(GilbertElliott),
}

/// The Gilbert-Elliott chain's four probabilities (a struct of its own, so that the loss
/// process, its check and its mean read them by name rather than each unpacking them).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GilbertElliott {
    pub p_good_bad: f64,
    pub p_bad_good: f64,
    #[serde(default)]
    pub loss_good: f64,
    #[serde(default = "one")]
    pub loss_bad: f64,
}

fn one() -> f64 {
    1.0
}

fn probability(name: &str, p: f64) -> Result<(), String> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(format!("{name} must be a probability in [0, 1], got {p}"))
    }
}

fn delay_ms(name: &str, ms: f64) -> Result<(), String> {
    if (0.0..=MAX_DELAY_MS).contains(&ms) {
        Ok(())
    } else {
        Err(format!("{name} must be in [0, {MAX_DELAY_MS}] ms, got {ms}"))
    }
}

impl Delay {
    /// Every variant's `kind`, as serde reads it (a test holds the two together).
    pub const KINDS: [&'static str; 3] = ["fixed", "uniform", "lognormal"];

    pub fn check(&self) -> Result<(), String> {
        match *self {
            Delay::Fixed { ms } => delay_ms("delay.ms", ms),
            Delay::Uniform { min_ms, max_ms } => {
                delay_ms("delay.min_ms", min_ms)?;
                delay_ms("delay.max_ms", max_ms)?;
                if min_ms > max_ms {
                    return Err(format!("delay.min_ms ({min_ms}) must be <= max_ms ({max_ms})"));
                }
                Ok(())
            }
            Delay::Lognormal { median_ms, spread } => {
                delay_ms("delay.median_ms", median_ms)?;
                if !(0.0..=MAX_SPREAD).contains(&spread) {
                    return Err(format!("delay.spread must be in [0, {MAX_SPREAD}], got {spread}"));
                }
                Ok(())
            }
        }
    }

    /// One delay, in ns (capped at MAX_DELAY_MS).
    pub fn draw_ns(&self, rng: &mut Rng) -> u64 {
        let ms = match *self {
            Delay::Fixed { ms } => ms,
            Delay::Uniform { min_ms, max_ms } => min_ms + (max_ms - min_ms) * rng.uniform(),
            Delay::Lognormal { median_ms, spread } => median_ms * (spread * standard_normal(rng)).exp(),
        };
        (ms.min(MAX_DELAY_MS) * 1e6) as u64
    }
}

/// Box-Muller: one standard normal draw.
fn standard_normal(rng: &mut Rng) -> f64 {
    let u1 = 1.0 - rng.uniform(); // (0, 1]: the log is finite
    let u2 = rng.uniform();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

impl Loss {
    /// Every variant's `kind`, as serde reads it (a test holds the two together).
    pub const KINDS: [&'static str; 3] = ["none", "bernoulli", "gilbert-elliott"];

    pub fn check(&self) -> Result<(), String> {
        match *self {
            Loss::None => Ok(()),
            Loss::Bernoulli { p } => probability("loss.p", p),
            Loss::GilbertElliott(ref ge) => ge.check(),
        }
    }

    /// The long-run fraction of requests lost.
    pub fn mean_rate(&self) -> f64 {
        match *self {
            Loss::None => 0.0,
            Loss::Bernoulli { p } => p,
            Loss::GilbertElliott(ref ge) => ge.mean_rate(),
        }
    }
}

impl GilbertElliott {
    fn check(&self) -> Result<(), String> {
        probability("loss.p_good_bad", self.p_good_bad)?;
        probability("loss.p_bad_good", self.p_bad_good)?;
        probability("loss.loss_good", self.loss_good)?;
        probability("loss.loss_bad", self.loss_bad)?;
        if self.p_bad_good == 0.0 && self.p_good_bad > 0.0 {
            return Err("loss.p_bad_good must be > 0 (else the bad state never ends)".into());
        }
        Ok(())
    }

    /// The long-run fraction lost: the bad state's share of the time weighs its loss.
    fn mean_rate(&self) -> f64 {
        let total = self.p_good_bad + self.p_bad_good;
        let bad = if total > 0.0 { self.p_good_bad / total } else { 0.0 };
        (1.0 - bad) * self.loss_good + bad * self.loss_bad
    }

    /// Whether the next request is lost in state `bad`, then the step of the chain.
    fn lose(&self, bad: &mut bool, rng: &mut Rng) -> bool {
        let lost = rng.uniform() < if *bad { self.loss_bad } else { self.loss_good };
        let flip = if *bad { self.p_bad_good } else { self.p_good_bad };
        if rng.uniform() < flip {
            *bad = !*bad;
        }
        lost
    }
}

/// A loss process with its state (Gilbert-Elliott remembers good/bad).
pub struct LossProcess {
    loss: Loss,
    bad: bool,
}

impl LossProcess {
    pub fn new(loss: Loss) -> Self {
        LossProcess { loss, bad: false }
    }

    /// Whether the next request is lost.
    pub fn lose(&mut self, rng: &mut Rng) -> bool {
        match self.loss {
            Loss::None => false,
            Loss::Bernoulli { p } => rng.uniform() < p,
            Loss::GilbertElliott(ref ge) => ge.lose(&mut self.bad, rng),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// serde's list of the variants, from its error on an unknown one.
    fn serde_kinds<T: serde::de::DeserializeOwned + std::fmt::Debug>() -> String {
        let e = serde_json::from_value::<T>(serde_json::json!({"kind": "no-such"})).unwrap_err();
        e.to_string()
    }

    #[test]
    fn the_described_kinds_are_the_variants_serde_reads() {
        let listed = |kinds: &[&str]| {
            let quoted: Vec<String> = kinds.iter().map(|k| format!("`{k}`")).collect();
            format!("unknown variant `no-such`, expected one of {}", quoted.join(", "))
        };
        assert_eq!(serde_kinds::<Delay>(), listed(&Delay::KINDS));
        assert_eq!(serde_kinds::<Loss>(), listed(&Loss::KINDS));
    }

    #[test]
    fn gilbert_elliott_reads_its_defaults_and_refuses_unknown_fields() {
        let read = |v| serde_json::from_value::<Loss>(v);
        let ge = read(serde_json::json!({"kind": "gilbert-elliott", "p_good_bad": 0.1, "p_bad_good": 0.2}));
        let want = GilbertElliott {
            p_good_bad: 0.1,
            p_bad_good: 0.2,
            loss_good: 0.0,
            loss_bad: 1.0,
        };
        assert_eq!(ge.ok(), Some(Loss::GilbertElliott(want)));
        let typo = serde_json::json!({"kind": "gilbert-elliott", "p_good_bad": 0.1, "p_bad_good": 0.2, "loss_bda": 1});
        assert!(read(typo)
            .unwrap_err()
            .to_string()
            .contains("unknown field `loss_bda`"));
        assert!(read(serde_json::json!({"kind": "bernoulli", "p": 0.1, "q": 1})).is_err());
    }

    fn loss_rate(loss: Loss, n: usize) -> f64 {
        let (mut rng, mut process) = (Rng::new(9), LossProcess::new(loss));
        (0..n).filter(|_| process.lose(&mut rng)).count() as f64 / n as f64
    }

    #[test]
    fn loss_rates_match_their_means() {
        assert!((loss_rate(Loss::Bernoulli { p: 0.05 }, 200_000) - 0.05).abs() < 0.003);
        let ge = Loss::GilbertElliott(GilbertElliott {
            p_good_bad: 0.01,
            p_bad_good: 0.2,
            loss_good: 0.0,
            loss_bad: 1.0,
        });
        let mean = ge.mean_rate();
        assert!((mean - 0.01 / 0.21).abs() < 1e-12);
        assert!((loss_rate(ge, 400_000) - mean).abs() < 0.006);
        assert_eq!(loss_rate(Loss::None, 1000), 0.0);
    }

    #[test]
    fn gilbert_elliott_losses_come_in_bursts() {
        let ge = Loss::GilbertElliott(GilbertElliott {
            p_good_bad: 0.01,
            p_bad_good: 0.1,
            loss_good: 0.0,
            loss_bad: 1.0,
        });
        let (mut rng, mut process) = (Rng::new(4), LossProcess::new(ge));
        let lost: Vec<bool> = (0..200_000).map(|_| process.lose(&mut rng)).collect();
        let runs = lost.windows(2).filter(|w| w[1] && !w[0]).count();
        let mean_burst = lost.iter().filter(|&&l| l).count() as f64 / runs as f64;
        assert!((mean_burst - 10.0).abs() < 1.5, "mean burst {mean_burst}");
    }

    #[test]
    fn lognormal_median_and_checks() {
        let d = Delay::Lognormal {
            median_ms: 150.0,
            spread: 0.3,
        };
        let mut rng = Rng::new(1);
        let mut v: Vec<u64> = (0..20_001).map(|_| d.draw_ns(&mut rng)).collect();
        v.sort_unstable();
        let median_ms = v[10_000] as f64 / 1e6;
        assert!((median_ms - 150.0).abs() < 3.0, "median {median_ms}");
        assert!(Delay::Uniform {
            min_ms: 5.0,
            max_ms: 1.0
        }
        .check()
        .is_err());
        assert!(Loss::Bernoulli { p: 1.5 }.check().is_err());
    }
}
