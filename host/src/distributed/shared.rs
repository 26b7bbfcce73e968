//! The exchange of a bucket multiselect run over shards ([`Exchange`]) on a
//! [`Communicator`]: every collective carries a status word, so that a process that failed
//! still takes part and every process learns of it at the same step; and the count of what
//! this process sent.

use std::cell::Cell;

use super::{Communicator, Traffic};
use crate::engine::multiselect::{Exchange, Gathering};
use crate::error::{Error, Result};

/// The root of gathers and broadcasts.
const ROOT: usize = 0;

pub(super) struct Shared<'a> {
    comm: &'a dyn Communicator,
    gather_max: u64,
    traffic: Cell<Traffic>,
}

impl<'a> Shared<'a> {
    pub(super) fn new(comm: &'a dyn Communicator, gather_max: u64) -> Self {
        Self { comm, gather_max, traffic: Cell::new(Traffic::default()) }
    }

    pub(super) fn traffic(&self) -> Traffic {
        self.traffic.get()
    }

    fn count(&self, bytes: usize) {
        let mut traffic = self.traffic.get();
        traffic.bytes_sent += bytes as u64;
        traffic.collectives += 1;
        self.traffic.set(traffic);
    }

    /// Checks that every process asks the same (`local`: its request's fingerprint, or
    /// its error).
    pub(super) fn check_same_request(&self, local: Result<u64>) -> Result<()> {
        let words = self.max(2, local.map(|hash| vec![hash, !hash]))?;
        if words[0] != !words[1] {
            return Err(Error::Distributed {
                failed_rank: None,
                message: "the processes asked for different ranks or quantiles".into(),
            });
        }
        Ok(())
    }

    /// An element-wise reduction of `len` words with a status word after them.
    fn reduce(&self, len: usize, local: Result<Vec<u64>>, max: bool) -> Result<Vec<u64>> {
        let (mut words, error) = match local {
            Ok(mut words) => {
                assert_eq!(words.len(), len, "every shard reduces the same number of words");
                words.push(0);
                (words, None)
            }
            Err(error) => (vec![0; len + 1], Some(error)),
        };
        words[len] = error.is_some() as u64;
        self.count(words.len() * 8);
        if max { self.comm.all_reduce_max(&mut words) } else { self.comm.all_reduce_sum(&mut words) }?;
        if words[len] != 0 {
            return Err(self.agree_on_error(error));
        }
        words.truncate(len);
        Ok(words)
    }

    /// After a status word said some process failed: every process's error in words (empty
    /// where none) goes to every process, and all return the first failed process's.
    fn agree_on_error(&self, error: Option<Error>) -> Error {
        let words = error.map(|e| e.to_string()).unwrap_or_default();
        self.count(words.len());
        match self.comm.all_gather(words.as_bytes()) {
            Err(transport) => transport,
            Ok(all) => match all.iter().position(|message| !message.is_empty()) {
                Some(rank) => Error::Distributed {
                    failed_rank: Some(rank),
                    message: String::from_utf8_lossy(&all[rank]).into_owned(),
                },
                None => Error::Distributed {
                    failed_rank: None,
                    message: "a process failed without saying why".into(),
                },
            },
        }
    }
}

/// `words` at `width` bytes each (little-endian), after a status byte (0: fine).
fn encode(words: &Result<Vec<u64>>, width: usize) -> Vec<u8> {
    match words {
        Ok(words) => {
            let mut bytes = Vec::with_capacity(1 + words.len() * width);
            bytes.push(0);
            for word in words {
                bytes.extend_from_slice(&word.to_le_bytes()[..width]);
            }
            bytes
        }
        Err(_) => vec![1],
    }
}

/// The words of [`encode`]'s bytes, or `None` when their status says the sender failed.
fn decode(bytes: &[u8], width: usize) -> Option<Vec<u64>> {
    let (&status, words) = bytes.split_first()?;
    (status == 0).then(|| {
        words
            .chunks_exact(width)
            .map(|chunk| {
                let mut word = [0u8; 8];
                word[..width].copy_from_slice(chunk);
                u64::from_le_bytes(word)
            })
            .collect()
    })
}

impl Exchange for Shared<'_> {
    fn gathering(&self) -> Option<Gathering> {
        Some(Gathering { label_max: self.gather_max, shards: self.comm.size() as u64 })
    }

    fn sum(&self, len: usize, local: Result<Vec<u64>>) -> Result<Vec<u64>> {
        self.reduce(len, local, false)
    }

    fn max(&self, len: usize, local: Result<Vec<u64>>) -> Result<Vec<u64>> {
        self.reduce(len, local, true)
    }

    fn concat(&self, local: Result<Vec<u64>>, width: usize) -> Result<Vec<u64>> {
        let bytes = encode(&local, width);
        self.count(bytes.len());
        let all = self.comm.all_gather(&bytes)?;
        let parts: Option<Vec<Vec<u64>>> = all.iter().map(|part| decode(part, width)).collect();
        match parts {
            Some(parts) => Ok(parts.concat()),
            None => Err(self.agree_on_error(local.err())),
        }
    }

    fn answer(
        &self,
        local: Result<Vec<u64>>,
        width: usize,
        answer: &mut dyn FnMut(Vec<u64>) -> Result<Vec<u64>>,
    ) -> Result<Vec<u64>> {
        let bytes = encode(&local, width);
        let root = self.comm.rank() == ROOT;
        self.count(if root { 0 } else { bytes.len() });
        let gathered = self.comm.gather(&bytes, ROOT)?;
        // The root answers, or says that someone failed; its status leads the broadcast.
        let (reply, error) = match gathered {
            Some(all) => {
                let parts: Option<Vec<Vec<u64>>> = all.iter().map(|part| decode(part, width)).collect();
                match parts.map(|parts| answer(parts.concat())) {
                    Some(Ok(found)) => (encode(&Ok(found), 8), local.err()),
                    Some(Err(error)) => (vec![1], Some(error)),
                    None => (vec![1], local.err()),
                }
            }
            None => (Vec::new(), local.err()),
        };
        if root {
            self.count(reply.len());
        }
        let reply = self.comm.broadcast(reply, ROOT)?;
        match decode(&reply, 8) {
            Some(found) => Ok(found),
            None => Err(self.agree_on_error(error)),
        }
    }
}
