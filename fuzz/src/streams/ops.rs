//! Decoding fuzz input into the device pool's set-up ([`Setup`]) and operations
//! ([`StreamOp`]), and encoding them back ([`encode`]), so that hand-made seeds
//! (`tests/stream_seeds.rs`) are written in the same format the fuzzer mutates.
//!
//! The format is plain bytes, no variable-length integers: a fixed [`SETUP_BYTES`]-byte set-up,
//! then operations of one selector byte and a fixed payload each, until the input runs out
//! (at most [`MAX_OPS`]). Running out inside an operation decodes the missing bytes as zeros
//! (`arbitrary`'s `Unstructured` does), which are always valid choices.

use arbitrary::{Arbitrary, Result, Unstructured};

/// The most operations one input runs.
pub const MAX_OPS: usize = 512;

/// Bytes of the set-up at the start of every input.
pub const SETUP_BYTES: usize = 10;

const MIB: usize = 1 << 20;

/// How a run is set up: the fake card, its clock, and the pool's configuration, each field one
/// byte of the input (interpreted by `streams::mod`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Setup {
    /// The card's memory: 16, 24, 32, 48 or 64 MiB.
    pub card: u8,
    /// Plain regions (and their rounding) or virtual-memory growth (and its chunk).
    pub regions: u8,
    /// Growth: fixed regions or doubling ones, and their sizes.
    pub growth: u8,
    /// The policy's limit, bypass threshold and trim threshold.
    pub policy: u8,
    /// The heap's granule.
    pub granule: u8,
    /// Frees per event (`DeviceConfig::batch`).
    pub batch: u8,
    /// Pool calls before an open batch is fenced (`DeviceConfig::batch_age`).
    pub batch_age: u8,
    /// The fake's clock: none (work completes by hand) below 128, else a clock and what its
    /// calls cost.
    pub clock: u8,
    /// The device's speed: a kernel's nanoseconds are its input byte times `1 << (speed % 16)`.
    pub speed: u8,
    /// How many streams the run starts with besides the default stream (0 to 3).
    pub streams: u8,
}

impl Setup {
    /// The card's memory in bytes.
    pub fn card_bytes(&self) -> usize {
        [16, 24, 32, 48, 64][self.card as usize % 5] * MIB
    }

    /// The bytes, in input order.
    pub fn bytes(&self) -> [u8; SETUP_BYTES] {
        [
            self.card,
            self.regions,
            self.growth,
            self.policy,
            self.granule,
            self.batch,
            self.batch_age,
            self.clock,
            self.speed,
            self.streams,
        ]
    }
}

impl<'a> Arbitrary<'a> for Setup {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut b = [0u8; SETUP_BYTES];
        u.fill_buffer(&mut b)?;
        Ok(Setup {
            card: b[0],
            regions: b[1],
            growth: b[2],
            policy: b[3],
            granule: b[4],
            batch: b[5],
            batch_age: b[6],
            clock: b[7],
            speed: b[8],
            streams: b[9],
        })
    }

    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (SETUP_BYTES, Some(SETUP_BYTES))
    }
}

/// A request size: a class byte and a 16-bit value, from 1 byte to 40 MiB (more than every
/// card has, so that exhaustion comes up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size {
    /// Which class: tiny, up to 64 KiB, up to 1 MiB, up to 4 MiB, whole MiB.
    pub class: u8,
    /// The value within the class.
    pub value: u16,
}

impl Size {
    /// The bytes asked for (never 0).
    pub fn bytes(self) -> usize {
        let v = self.value as usize;
        match self.class {
            0..=79 => 1 + v % 512,
            80..=139 => 1 + v,
            140..=199 => 1 + v * 16,
            200..=239 => 1 + v * 64,
            _ => ((1 + v % 40) * MIB).saturating_sub(v >> 6),
        }
    }

    /// A size from its class and value.
    pub const fn new(class: u8, value: u16) -> Size {
        Size { class, value }
    }
}

/// One operation on the pool, the fake's streams or its timeline. `pick` chooses among the
/// live blocks, `stream` among the live streams (modulo their count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamOp {
    /// Allocates on a stream, then launches a kernel using the block there.
    Alloc {
        /// Which stream.
        stream: u8,
        /// Bytes asked for.
        size: Size,
        /// The kernel's length (times the device's speed).
        ns: u8,
    },
    /// Frees a live block (on its stream).
    Free {
        /// Which block.
        pick: u8,
    },
    /// Launches a kernel using a live block on one of the streams that use it.
    Use {
        /// Which block.
        pick: u8,
        /// Which of its streams (its own, then those `record_stream` named).
        which: u8,
        /// The kernel's length.
        ns: u8,
    },
    /// `record_stream(block, stream)`, then a kernel using the block on that stream.
    RecordStream {
        /// Which block.
        pick: u8,
        /// Which stream.
        stream: u8,
        /// The kernel's length.
        ns: u8,
    },
    /// Device work that uses no block, then the host's own work.
    Work {
        /// Which stream.
        stream: u8,
        /// The kernel's length.
        ns: u8,
        /// Host nanoseconds (times the device's speed) before the next call.
        host: u8,
    },
    /// Moves the host clock on (with a clock), or completes work by hand (without one).
    Complete {
        /// What: a stream's work, everything up to a saved mark, everything, or saves a mark.
        how: u8,
        /// Which stream, for a stream's work.
        stream: u8,
    },
    /// Creates a stream.
    CreateStream,
    /// `forget_stream`, then destroys the stream (only a created stream that captures nothing
    /// and that no live block uses).
    ForgetStream {
        /// Which stream.
        stream: u8,
    },
    /// Begins a capture on a stream (telling the pool first).
    BeginCapture {
        /// Which stream.
        stream: u8,
    },
    /// Ends a capture (telling the pool after).
    EndCapture {
        /// Which capturing stream.
        stream: u8,
    },
    /// `process_events`.
    ProcessEvents,
    /// `trim`.
    Trim,
    /// Frees a stale copy of a block freed earlier: misuse, to be refused.
    StaleFree {
        /// Which stale block.
        pick: u8,
    },
    /// `record_stream` of a stale copy: misuse, to be refused.
    StaleRecord {
        /// Which stale block.
        pick: u8,
        /// Which stream.
        stream: u8,
    },
}

/// Each operation's first selector value (the rest of its range decodes to it too).
const ALLOC: u8 = 0;
const FREE: u8 = 70;
const USE: u8 = 125;
const RECORD: u8 = 145;
const WORK: u8 = 160;
const COMPLETE: u8 = 180;
const CREATE: u8 = 196;
const FORGET: u8 = 204;
const BEGIN: u8 = 210;
const END: u8 = 217;
const PROCESS: u8 = 224;
const TRIM: u8 = 232;
const STALE_FREE: u8 = 238;
const STALE_RECORD: u8 = 248;

impl<'a> Arbitrary<'a> for StreamOp {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let sel = u8::arbitrary(u)?;
        let mut byte = || u8::arbitrary(u);
        Ok(match sel {
            ALLOC..FREE => {
                let stream = byte()?;
                let class = byte()?;
                let value = u16::from_le_bytes([byte()?, byte()?]);
                let ns = byte()?;
                StreamOp::Alloc {
                    stream,
                    size: Size { class, value },
                    ns,
                }
            }
            FREE..USE => StreamOp::Free { pick: byte()? },
            USE..RECORD => StreamOp::Use {
                pick: byte()?,
                which: byte()?,
                ns: byte()?,
            },
            RECORD..WORK => StreamOp::RecordStream {
                pick: byte()?,
                stream: byte()?,
                ns: byte()?,
            },
            WORK..COMPLETE => StreamOp::Work {
                stream: byte()?,
                ns: byte()?,
                host: byte()?,
            },
            COMPLETE..CREATE => StreamOp::Complete {
                how: byte()?,
                stream: byte()?,
            },
            CREATE..FORGET => StreamOp::CreateStream,
            FORGET..BEGIN => StreamOp::ForgetStream { stream: byte()? },
            BEGIN..END => StreamOp::BeginCapture { stream: byte()? },
            END..PROCESS => StreamOp::EndCapture { stream: byte()? },
            PROCESS..TRIM => StreamOp::ProcessEvents,
            TRIM..STALE_FREE => StreamOp::Trim,
            STALE_FREE..STALE_RECORD => StreamOp::StaleFree { pick: byte()? },
            STALE_RECORD..=u8::MAX => StreamOp::StaleRecord {
                pick: byte()?,
                stream: byte()?,
            },
        })
    }

    fn size_hint(_depth: usize) -> (usize, Option<usize>) {
        (1, Some(6))
    }
}

/// Appends the bytes that decode to `op`.
pub fn encode_op(op: &StreamOp, out: &mut Vec<u8>) {
    match *op {
        StreamOp::Alloc { stream, size, ns } => {
            let [lo, hi] = size.value.to_le_bytes();
            out.extend([ALLOC, stream, size.class, lo, hi, ns]);
        }
        StreamOp::Free { pick } => out.extend([FREE, pick]),
        StreamOp::Use { pick, which, ns } => out.extend([USE, pick, which, ns]),
        StreamOp::RecordStream { pick, stream, ns } => out.extend([RECORD, pick, stream, ns]),
        StreamOp::Work { stream, ns, host } => out.extend([WORK, stream, ns, host]),
        StreamOp::Complete { how, stream } => out.extend([COMPLETE, how, stream]),
        StreamOp::CreateStream => out.push(CREATE),
        StreamOp::ForgetStream { stream } => out.extend([FORGET, stream]),
        StreamOp::BeginCapture { stream } => out.extend([BEGIN, stream]),
        StreamOp::EndCapture { stream } => out.extend([END, stream]),
        StreamOp::ProcessEvents => out.push(PROCESS),
        StreamOp::Trim => out.push(TRIM),
        StreamOp::StaleFree { pick } => out.extend([STALE_FREE, pick]),
        StreamOp::StaleRecord { pick, stream } => out.extend([STALE_RECORD, pick, stream]),
    }
}

/// The bytes of a whole input: `setup`, then `ops`.
pub fn encode(setup: &Setup, ops: &[StreamOp]) -> Vec<u8> {
    let mut out = setup.bytes().to_vec();
    for op in ops {
        encode_op(op, &mut out);
    }
    out
}

/// A whole input of the `stream_order` target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamInput {
    /// The set-up.
    pub setup: Setup,
    /// The operations, in order.
    pub ops: Vec<StreamOp>,
}

impl<'a> Arbitrary<'a> for StreamInput {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let setup = u.arbitrary()?;
        let mut ops = Vec::with_capacity((u.len() / 2).min(MAX_OPS));
        while !u.is_empty() && ops.len() < MAX_OPS {
            match StreamOp::arbitrary(u) {
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
        Ok(StreamInput { setup, ops })
    }

    fn arbitrary_take_rest(mut u: Unstructured<'a>) -> Result<Self> {
        Self::arbitrary(&mut u)
    }
}
