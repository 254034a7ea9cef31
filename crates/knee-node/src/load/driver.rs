//! The driver trait: the only part of a load generator each system writes itself.

/// Makes the requests of one sender. Each sending thread owns one driver.
pub trait Driver: Send {
    /// Writes the next request's body into `body` (empty on entry) and returns its operation
    /// code and one request parameter worth recording with the sample (matrix: P; 0 if none).
    fn next_request(&mut self, body: &mut Vec<u8>) -> (u16, u32);
}

/// Creates drivers and checks replies for one system.
pub trait DriverFactory: Send + Sync {
    /// A driver for one sending thread; `stream` makes each thread's random choices distinct.
    fn driver(&self, seed: u64, stream: u64) -> Box<dyn Driver>;

    /// Checks a successful reply's body; an `Err` makes the sample's status `error`.
    fn check_reply(&self, op: u16, body: &[u8]) -> Result<(), String>;
}
