//! stream (report 000): block services that emulate lossy links, and the FrameAccessor
//! client that fetches frames from one of them (serial) or several (parallel).
//!
//! UDP rather than the framed TCP of the other systems: a lost datagram is the point.
//! `docs/stream.md` describes the design and what it guarantees.

mod accessor;
mod client;
mod config;
mod datagram;
mod frames;
mod lines;
mod link;
mod rto;
mod service;
mod timer;

/// `knee-node serve stream`: one block service.
pub fn serve(opts: &crate::serve::ServeOptions) -> Result<(), String> {
    service::run(opts)
}

/// `knee-node load stream`: the FrameAccessor client, which records one sample per request.
pub fn client(config: &serde_json::Value) -> Result<Box<dyn crate::load::harness::ClientRole>, String> {
    client::role(config)
}
