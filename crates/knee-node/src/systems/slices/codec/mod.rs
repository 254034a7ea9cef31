//! The slices messages: the data path (`item`: Item, Reply and Acks in a fixed
//! little-endian layout) and the control protocol (`control`: postcard between the PNs and
//! the LB). Both decode network bytes into a typed error, never a panic.

mod control;
mod item;
#[cfg(test)]
mod tests;

pub use control::*;
pub use item::*;
