//! A pool of workers behind one bounded FIFO queue shared by every connection.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use super::reply::{finish, Replier};
use super::{Handler, ServerStats, StatsExtra};
use crate::clock;
use crate::wire::RequestHeader;

pub(super) struct Job {
    pub replier: Arc<Replier>,
    pub header: RequestHeader,
    pub body: Vec<u8>,
    pub arrived_ns: u64,
}

pub(super) struct Pool {
    queue: Mutex<VecDeque<Job>>,
    ready: Condvar,
    max_queue: usize,
}

impl Pool {
    pub fn start<E: StatsExtra>(
        threads: usize,
        max_queue: usize,
        handler: Arc<dyn Handler<E>>,
        stats: Arc<ServerStats>,
    ) -> Arc<Pool> {
        let pool = Arc::new(Pool {
            queue: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            max_queue,
        });
        for i in 0..threads {
            let (pool, handler, stats) = (pool.clone(), handler.clone(), stats.clone());
            std::thread::Builder::new()
                .name(format!("worker-{i}"))
                .spawn(move || pool.work(&*handler, &stats))
                .expect("spawning a worker thread");
        }
        pool
    }

    /// Appends a job; gives it back when the queue is full.
    pub fn push(&self, job: Job) -> Result<(), Job> {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= self.max_queue {
            return Err(job);
        }
        q.push_back(job);
        drop(q);
        self.ready.notify_one();
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.queue.lock().map(|q| q.len()).unwrap_or(0)
    }

    fn work<E: StatsExtra>(&self, handler: &dyn Handler<E>, stats: &ServerStats) {
        let mut reply = Vec::new();
        loop {
            let job = {
                let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(job) = q.pop_front() {
                        break job;
                    }
                    q = self.ready.wait(q).unwrap_or_else(|p| p.into_inner());
                }
            };
            let started_ns = clock::now_ns();
            reply.clear();
            let outcome = handler.handle_request(&job.header, &job.body, &mut reply);
            let done_ns = clock::now_ns();
            finish(
                &job.replier,
                stats,
                job.header.request_id,
                outcome,
                done_ns - job.arrived_ns,
                started_ns - job.arrived_ns,
                done_ns - started_ns,
                &reply,
            );
        }
    }
}
