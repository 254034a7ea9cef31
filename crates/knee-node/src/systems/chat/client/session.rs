//! What one client asks, in order: the operation mix of a session.

use super::config::{ChatDriver, Mix};
use crate::systems::chat::codec::{read_name, read_text, Op, Request};
use crate::systems::chat::{OP_FETCH, OP_POST};
use crate::wire::BodyReader;

pub struct Session {
    client: String,
    user: String,
    password: String,
    room: u32,
    text: Vec<u8>,
    reply_bytes: u32,
    mix: Mix,
    step: usize,
    /// Highest message id seen, for the next fetch.
    last_id: u64,
}

impl Session {
    pub fn new(d: &ChatDriver, index: usize) -> Session {
        let name = format!("{}-{index}", d.client_prefix);
        Session {
            client: name.clone(),
            user: name,
            password: format!("pw{index}"),
            room: index as u32 % d.rooms,
            text: vec![b'm'; d.message_bytes],
            reply_bytes: d.reply_bytes,
            mix: d.mix,
            step: 0,
            last_id: 0,
        }
    }

    pub fn client(&self) -> &str {
        &self.client
    }

    /// The next request of the cycle.
    pub fn next(&mut self) -> Request {
        let cycle: &[fn(&Session) -> Op] = match self.mix {
            Mix::LoginLogout => &[login, logout],
            Mix::Session => &[login, join, post, fetch, logout],
        };
        let op = cycle[self.step % cycle.len()](self);
        self.step += 1;
        Request {
            client: self.client.clone(),
            reply_bytes: self.reply_bytes,
            op,
        }
    }

    /// Learns the newest message id from a post or fetch reply (best effort: a reply that
    /// does not parse leaves it unchanged).
    pub fn observe(&mut self, op: u16, body: &[u8]) {
        let mut r = BodyReader::new(body);
        let Ok(_ack) = r.u32("ack") else { return };
        if op == OP_POST {
            if let Ok(id) = r.u64("id") {
                self.last_id = self.last_id.max(id);
            }
        } else if op == OP_FETCH {
            let Ok(n) = r.u32("n") else { return };
            for _ in 0..n {
                let Ok(id) = r.u64("id") else { return };
                if read_name(&mut r, "user").is_err() || read_text(&mut r).is_err() {
                    return;
                }
                self.last_id = self.last_id.max(id);
            }
        }
    }
}

fn login(s: &Session) -> Op {
    Op::Login {
        user: s.user.clone(),
        password: s.password.clone(),
    }
}

fn logout(s: &Session) -> Op {
    Op::Logout {
        user: s.user.clone(),
        room: s.room,
    }
}

fn join(s: &Session) -> Op {
    Op::Join {
        user: s.user.clone(),
        room: s.room,
    }
}

fn post(s: &Session) -> Op {
    Op::Post {
        user: s.user.clone(),
        room: s.room,
        text: s.text.clone(),
    }
}

fn fetch(s: &Session) -> Op {
    Op::Fetch {
        room: s.room,
        since_id: s.last_id,
        max: 100,
    }
}
