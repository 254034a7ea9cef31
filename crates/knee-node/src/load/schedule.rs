//! Open-loop schedules: when each request is meant to leave, as ns offsets from the start.
//! A config's schedule is built once (`Schedule`, in the harness's plan); a run draws its
//! send times from it through a `Pacer`, the progress lines read its target rate.

use serde::{Deserialize, Serialize};

use std::sync::Arc;

use crate::rng::Rng;

#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ScheduleConfig {
    /// Open loop, exponential inter-arrival times.
    Poisson { rate_per_s: f64 },
    /// Open loop, evenly spaced sends.
    Constant { rate_per_s: f64 },
    /// Open loop, Poisson at each `[rate_per_s, duration_s]` step in turn.
    Steps { steps: Vec<(f64, f64)> },
    /// Closed loop: `clients` each send, wait for the reply, think, and send again.
    Closed {
        clients: usize,
        #[serde(default)]
        think_ms: f64,
        #[serde(default)]
        think: Think,
    },
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Think {
    #[default]
    Fixed,
    Exponential,
}

/// An open-loop schedule: its rates, never its progress (a `Pacer` keeps that).
#[derive(Debug)]
pub enum Schedule {
    Poisson { mean_gap_ns: f64 },
    Constant { gap_ns: f64 },
    Steps { steps: Vec<(f64, f64)> },
}

impl Schedule {
    /// `None` for the closed loop, which has no schedule.
    pub fn new(cfg: &ScheduleConfig) -> Option<Schedule> {
        Some(match cfg {
            ScheduleConfig::Poisson { rate_per_s } => Schedule::Poisson {
                mean_gap_ns: 1e9 / rate_per_s,
            },
            ScheduleConfig::Constant { rate_per_s } => Schedule::Constant {
                gap_ns: 1e9 / rate_per_s,
            },
            ScheduleConfig::Steps { steps } => Schedule::Steps { steps: steps.clone() },
            ScheduleConfig::Closed { .. } => return None,
        })
    }

    /// The target rate at an offset, for progress lines.
    pub fn rate_at(&self, offset_ns: u64) -> f64 {
        match self {
            Schedule::Poisson { mean_gap_ns } => 1e9 / mean_gap_ns,
            Schedule::Constant { gap_ns } => 1e9 / gap_ns,
            Schedule::Steps { steps } => {
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
            Schedule::Steps { steps } => Some(steps.iter().map(|s| s.1).sum()),
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

/// An open loop's send times: its schedule, how far it has come, and the schedule's own
/// random draws, seeded apart from the request choices so that a driver's draws never shift
/// the send times.
pub struct Pacer {
    schedule: Arc<Schedule>,
    rng: Rng,
    /// The last offset drawn (Poisson, steps).
    at_ns: f64,
    /// Sends drawn so far (constant).
    index: u64,
    /// The step under way and its start (steps).
    step: usize,
    step_start_ns: f64,
}

impl Pacer {
    /// The send times of `schedule` for a load seeded with `seed`.
    pub fn new(schedule: Arc<Schedule>, seed: u64) -> Pacer {
        Pacer {
            schedule,
            rng: Rng::new(seed ^ 0x5EED_5C4E_D01E),
            at_ns: 0.0,
            index: 0,
            step: 0,
            step_start_ns: 0.0,
        }
    }

    /// The next intended send offset in ns, or `None` when the schedule is over.
    pub fn next_offset_ns(&mut self) -> Option<u64> {
        match &*self.schedule {
            Schedule::Poisson { mean_gap_ns } => {
                self.at_ns += self.rng.exponential(*mean_gap_ns);
                Some(self.at_ns as u64)
            }
            Schedule::Constant { gap_ns } => {
                let at = self.index as f64 * *gap_ns;
                self.index += 1;
                Some(at as u64)
            }
            Schedule::Steps { steps } => loop {
                let (rate_per_s, duration_s) = *steps.get(self.step)?;
                let step_end_ns = self.step_start_ns + duration_s * 1e9;
                let next = self.at_ns + self.rng.exponential(1e9 / rate_per_s);
                if next < step_end_ns {
                    self.at_ns = next;
                    return Some(next as u64);
                }
                // Memorylessness: restarting the draw at the step boundary keeps each step Poisson.
                self.step += 1;
                self.step_start_ns = step_end_ns;
                self.at_ns = step_end_ns;
            },
        }
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
        let s = Schedule::new(&ScheduleConfig::Constant { rate_per_s: 1000.0 }).unwrap();
        let mut p = Pacer::new(Arc::new(s), 1);
        let t: Vec<u64> = (0..4).map(|_| p.next_offset_ns().unwrap()).collect();
        assert_eq!(t, vec![0, 1_000_000, 2_000_000, 3_000_000]);
    }

    #[test]
    fn steps_follow_their_rates_and_end() {
        let cfg = ScheduleConfig::Steps {
            steps: vec![(1000.0, 1.0), (4000.0, 0.5)],
        };
        let s = Arc::new(Schedule::new(&cfg).unwrap());
        let mut p = Pacer::new(s.clone(), 2);
        let mut offsets = Vec::new();
        while let Some(t) = p.next_offset_ns() {
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
