//! The versioned byte encoding of proofs (layout in docs/format.md).
//!
//! Encodings are canonical: every byte is read and checked, so a proof has exactly
//! one encoding and no bit can change without the decoder or verifier noticing.

use alloc::vec::Vec;

use super::{Chunk, LeafData, MultiProof, MultiTerminal, PathProof, Witness};
use crate::bytes::Cursor;
use crate::trie::node::{prefix, Node, MAX_DEPTH};
use crate::Error;

const VERSION: u8 = 1;
const KIND_PATH: u8 = 1;
const KIND_MULTI: u8 = 2;
const KIND_WITNESS: u8 = 3;
const KIND_CHUNK: u8 = 4;
const EMPTY: u8 = 0;
const LEAF: u8 = 1;

impl PathProof {
    /// The proof's bytes: version, kind, terminal, sibling count, siblings.
    ///
    /// Fails with [`Error::MalformedProof`] for a path deeper than 256, which no
    /// trie has and the encoding cannot hold.
    pub fn encode(&self) -> Result<Vec<u8>, Error> {
        if self.siblings.len() > MAX_DEPTH {
            return Err(Error::MalformedProof("path deeper than 256"));
        }
        let mut out = Vec::with_capacity(2 + 65 + 2 + 32 * self.siblings.len());
        out.extend_from_slice(&[VERSION, KIND_PATH]);
        match &self.terminal {
            None => out.push(EMPTY),
            Some(leaf) => {
                out.push(LEAF);
                out.extend_from_slice(&leaf.key_path);
                out.extend_from_slice(&leaf.value_hash);
            }
        }
        out.extend_from_slice(&(self.siblings.len() as u16).to_le_bytes());
        put_nodes(&mut out, &self.siblings);
        Ok(out)
    }

    /// Parses [`PathProof::encode`]'s output; any other input is an error.
    pub fn decode(bytes: &[u8]) -> Result<PathProof, Error> {
        let mut r = Reader::new(bytes);
        r.header(KIND_PATH)?;
        let terminal = match r.u8()? {
            EMPTY => None,
            LEAF => Some(LeafData {
                key_path: r.array()?,
                value_hash: r.array()?,
            }),
            _ => return Err(Error::MalformedProof("unknown terminal kind")),
        };
        let count = r.u16()? as usize;
        if count > MAX_DEPTH {
            return Err(Error::MalformedProof("path deeper than 256"));
        }
        let siblings = r.nodes(count)?;
        r.end()?;
        Ok(PathProof { terminal, siblings })
    }
}

impl MultiProof {
    /// The length of [`MultiProof::encode`]'s output, without encoding.
    pub fn encoded_len(&self) -> usize {
        let terminals: usize = self
            .terminals
            .iter()
            .map(|t| match t.value_hash {
                Some(_) => 3 + 64,
                None => 3 + prefix_bytes(t.depth as usize).min(32),
            })
            .sum();
        2 + 4 + terminals + 4 + 32 * self.siblings.len()
    }

    /// The proof's bytes: version, kind, terminals, siblings.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&[VERSION, KIND_MULTI]);
        out.extend_from_slice(&(self.terminals.len() as u32).to_le_bytes());
        for t in &self.terminals {
            out.extend_from_slice(&t.depth.to_le_bytes());
            match &t.value_hash {
                Some(vh) => {
                    out.push(LEAF);
                    out.extend_from_slice(&t.path);
                    out.extend_from_slice(vh);
                }
                None => {
                    out.push(EMPTY);
                    // A hand-built depth past 256 encodes as given; decoding rejects it.
                    out.extend_from_slice(&t.path[..prefix_bytes(t.depth as usize).min(32)]);
                }
            }
        }
        out.extend_from_slice(&(self.siblings.len() as u32).to_le_bytes());
        put_nodes(&mut out, &self.siblings);
        out
    }

    /// Parses [`MultiProof::encode`]'s output; any other input is an error.
    pub fn decode(bytes: &[u8]) -> Result<MultiProof, Error> {
        let mut r = Reader::new(bytes);
        r.header(KIND_MULTI)?;
        let count = r.u32()? as usize;
        // Each terminal takes at least 3 bytes: refuse counts the input cannot hold
        // before allocating for them.
        let mut terminals = Vec::with_capacity(count.min(r.remaining() / 3));
        for _ in 0..count {
            let depth = r.u16()?;
            if depth as usize > MAX_DEPTH {
                return Err(Error::MalformedProof("terminal deeper than 256"));
            }
            let terminal = match r.u8()? {
                LEAF => MultiTerminal {
                    depth,
                    path: r.array()?,
                    value_hash: Some(r.array()?),
                },
                EMPTY => {
                    let mut path = [0u8; 32];
                    let n = prefix_bytes(depth as usize);
                    path[..n].copy_from_slice(r.take(n)?);
                    if prefix(&path, depth as usize) != path {
                        return Err(Error::MalformedProof(
                            "bits set past an empty terminal's depth",
                        ));
                    }
                    MultiTerminal {
                        depth,
                        path,
                        value_hash: None,
                    }
                }
                _ => return Err(Error::MalformedProof("unknown terminal kind")),
            };
            terminals.push(terminal);
        }
        let count = r.u32()? as usize;
        let siblings = r.nodes(count)?;
        r.end()?;
        Ok(MultiProof {
            terminals,
            siblings,
        })
    }
}

impl Witness {
    /// The length of [`Witness::encode`]'s output, without encoding: what the
    /// witness costs to ship.
    pub fn encoded_len(&self) -> usize {
        let writes: usize = self
            .writes
            .iter()
            .map(|(_, vh)| if vh.is_some() { 65 } else { 33 })
            .sum();
        2 + 4 + self.proof.encoded_len() + 4 + writes
    }

    /// The witness's bytes: version, kind, the encoded multi-proof (length-prefixed),
    /// then each write as key, tag (0 delete, 1 set) and value hash if set.
    pub fn encode(&self) -> Vec<u8> {
        let proof = self.proof.encode();
        let mut out = Vec::with_capacity(self.encoded_len());
        out.extend_from_slice(&[VERSION, KIND_WITNESS]);
        out.extend_from_slice(&(proof.len() as u32).to_le_bytes());
        out.extend_from_slice(&proof);
        out.extend_from_slice(&(self.writes.len() as u32).to_le_bytes());
        for (key, value_hash) in &self.writes {
            out.extend_from_slice(key);
            match value_hash {
                Some(vh) => {
                    out.push(LEAF);
                    out.extend_from_slice(vh);
                }
                None => out.push(EMPTY),
            }
        }
        out
    }

    /// Parses [`Witness::encode`]'s output; any other input is an error.
    pub fn decode(bytes: &[u8]) -> Result<Witness, Error> {
        let mut r = Reader::new(bytes);
        r.header(KIND_WITNESS)?;
        let proof_len = r.u32()? as usize;
        let proof = MultiProof::decode(r.take(proof_len)?)?;
        let count = r.u32()? as usize;
        // Each write takes at least 33 bytes.
        let mut writes = Vec::with_capacity(count.min(r.remaining() / 33));
        for _ in 0..count {
            let key = r.array()?;
            let value_hash = match r.u8()? {
                EMPTY => None,
                LEAF => Some(r.array()?),
                _ => return Err(Error::MalformedProof("unknown write kind")),
            };
            writes.push((key, value_hash));
        }
        r.end()?;
        Ok(Witness { proof, writes })
    }
}

impl Chunk {
    /// The chunk's bytes: version, kind, start, end (tag 0 none, 1 then the
    /// key), entry count, each entry as key, u32 length and value, then the
    /// encoded proof (length-prefixed).
    pub fn encode(&self) -> Vec<u8> {
        let proof = self.proof().encode();
        let values: usize = self.entries().iter().map(|(_, v)| 36 + v.len()).sum();
        let mut out = Vec::with_capacity(2 + 33 + 32 + 4 + values + 4 + proof.len());
        out.extend_from_slice(&[VERSION, KIND_CHUNK]);
        out.extend_from_slice(self.start());
        match self.end() {
            None => out.push(EMPTY),
            Some(end) => {
                out.push(LEAF);
                out.extend_from_slice(end);
            }
        }
        out.extend_from_slice(&(self.entries().len() as u32).to_le_bytes());
        for (key, value) in self.entries() {
            out.extend_from_slice(key);
            // At most crate::MAX_VALUE_LEN long: Chunk::new and decode refuse more.
            out.extend_from_slice(&(value.len() as u32).to_le_bytes());
            out.extend_from_slice(value);
        }
        out.extend_from_slice(&(proof.len() as u32).to_le_bytes());
        out.extend_from_slice(&proof);
        out
    }

    /// Parses [`Chunk::encode`]'s output; any other input is an error. The
    /// chunk still needs [`Chunk::verify`].
    pub fn decode(bytes: &[u8]) -> Result<Chunk, Error> {
        let mut r = Reader::new(bytes);
        r.header(KIND_CHUNK)?;
        let start = r.array()?;
        let end = match r.u8()? {
            EMPTY => None,
            LEAF => Some(r.array()?),
            _ => return Err(Error::MalformedProof("unknown chunk end kind")),
        };
        let count = r.u32()? as usize;
        // Each entry takes at least 36 bytes.
        let mut entries = Vec::with_capacity(count.min(r.remaining() / 36));
        for _ in 0..count {
            let key = r.array()?;
            let len = r.u32()? as usize;
            crate::check_value_len(len)?;
            entries.push((key, r.take(len)?.to_vec()));
        }
        let proof_len = r.u32()? as usize;
        let proof = MultiProof::decode(r.take(proof_len)?)?;
        r.end()?;
        Ok(Chunk::from_parts(start, end, entries, proof))
    }
}

fn prefix_bytes(depth: usize) -> usize {
    depth.div_ceil(8)
}

fn put_nodes(out: &mut Vec<u8>, nodes: &[Node]) {
    for node in nodes {
        out.extend_from_slice(node);
    }
}

/// A [`Cursor`] whose running out is a malformed proof.
struct Reader<'a>(Cursor<'a>);

const TRUNCATED: Error = Error::MalformedProof("truncated");

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader(Cursor::new(bytes))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Error> {
        self.0.take(n).ok_or(TRUNCATED)
    }

    fn u8(&mut self) -> Result<u8, Error> {
        self.0.u8().ok_or(TRUNCATED)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        self.0.array().ok_or(TRUNCATED)
    }

    fn u16(&mut self) -> Result<u16, Error> {
        self.0.u16().ok_or(TRUNCATED)
    }

    fn u32(&mut self) -> Result<u32, Error> {
        self.0.u32().ok_or(TRUNCATED)
    }

    fn remaining(&self) -> usize {
        self.0.remaining()
    }

    fn header(&mut self, kind: u8) -> Result<(), Error> {
        if self.u8()? != VERSION {
            return Err(Error::MalformedProof("unknown proof format version"));
        }
        if self.u8()? != kind {
            return Err(Error::MalformedProof("wrong proof kind"));
        }
        Ok(())
    }

    fn nodes(&mut self, count: usize) -> Result<Vec<Node>, Error> {
        if self.remaining() / 32 < count {
            return Err(TRUNCATED);
        }
        (0..count).map(|_| self.array()).collect()
    }

    fn end(&self) -> Result<(), Error> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(Error::MalformedProof("trailing bytes"))
        }
    }
}
