//! The fake device's notion of time: streams, the events recorded on them, and which recorded
//! work has completed. Nothing completes by itself; the test says when (or a synchronising
//! call, which on a real device would wait until it had).

use std::collections::HashMap;

/// Each recording of an event gets the next sequence number, across all streams, so "all work
/// recorded so far" is one number (a [`FakeMark`]).
///
/// Invariants: stream 0 (the default stream) always exists; every recorded event names a
/// stream in `streams` (destroyed streams stay, flagged, until their events are gone with
/// them); an event recorded at `seq` on stream `s` has completed iff
/// `seq <= streams[s].completed`.
#[derive(Debug)]
pub(crate) struct Timeline {
    last_seq: u64,
    next_stream: u64,
    next_event: u64,
    streams: HashMap<u64, StreamState>,
    events: HashMap<u64, Option<Recorded>>,
}

#[derive(Clone, Copy, Debug, Default)]
struct StreamState {
    /// Work recorded on the stream up to this sequence number has completed.
    completed: u64,
    /// The sequence number of the last recording on the stream.
    last: u64,
    destroyed: bool,
}

#[derive(Clone, Copy, Debug)]
struct Recorded {
    stream: u64,
    seq: u64,
}

/// A point in the fake device's timeline: everything recorded before it was taken (see
/// [`FakeDriver::mark`](super::FakeDriver::mark)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FakeMark(pub(crate) u64);

/// Why a timeline operation was refused: the handle does not exist (any more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BadHandle;

impl Timeline {
    pub(crate) fn new() -> Timeline {
        let mut streams = HashMap::new();
        streams.insert(0, StreamState::default());
        Timeline {
            last_seq: 0,
            next_stream: 1,
            next_event: 1,
            streams,
            events: HashMap::new(),
        }
    }

    fn live_stream(&mut self, stream: u64) -> Result<&mut StreamState, BadHandle> {
        match self.streams.get_mut(&stream) {
            Some(s) if !s.destroyed => Ok(s),
            _ => Err(BadHandle),
        }
    }

    pub(crate) fn create_stream(&mut self) -> u64 {
        let id = self.next_stream;
        self.next_stream += 1;
        self.streams.insert(id, StreamState::default());
        id
    }

    /// Destroys a created stream; its recorded work still completes when told to.
    pub(crate) fn destroy_stream(&mut self, stream: u64) -> Result<(), BadHandle> {
        if stream == 0 {
            return Err(BadHandle);
        }
        self.live_stream(stream)?.destroyed = true;
        Ok(())
    }

    /// Completes everything recorded on a live stream.
    pub(crate) fn synchronize_stream(&mut self, stream: u64) -> Result<(), BadHandle> {
        let s = self.live_stream(stream)?;
        s.completed = s.last;
        Ok(())
    }

    pub(crate) fn create_event(&mut self) -> u64 {
        let id = self.next_event;
        self.next_event += 1;
        self.events.insert(id, None);
        id
    }

    pub(crate) fn destroy_event(&mut self, event: u64) -> Result<(), BadHandle> {
        self.events.remove(&event).map(drop).ok_or(BadHandle)
    }

    pub(crate) fn record(&mut self, event: u64, stream: u64) -> Result<(), BadHandle> {
        if !self.events.contains_key(&event) {
            return Err(BadHandle);
        }
        let seq = self.last_seq + 1;
        self.live_stream(stream)?.last = seq;
        self.last_seq = seq;
        self.events.insert(event, Some(Recorded { stream, seq }));
        Ok(())
    }

    /// Whether the event's work has completed (an event never recorded has).
    pub(crate) fn query(&self, event: u64) -> Result<bool, BadHandle> {
        match self.events.get(&event).ok_or(BadHandle)? {
            None => Ok(true),
            Some(r) => Ok(r.seq <= self.streams[&r.stream].completed),
        }
    }

    /// Completes the event's work, and with it everything recorded before it on its stream
    /// (a stream runs in order).
    pub(crate) fn complete(&mut self, event: u64) -> Result<(), BadHandle> {
        if let Some(r) = *self.events.get(&event).ok_or(BadHandle)? {
            let s = self.streams.get_mut(&r.stream).ok_or(BadHandle)?;
            s.completed = s.completed.max(r.seq);
        }
        Ok(())
    }

    /// Completes everything recorded on a stream, destroyed or not.
    pub(crate) fn complete_stream(&mut self, stream: u64) -> Result<(), BadHandle> {
        let s = self.streams.get_mut(&stream).ok_or(BadHandle)?;
        s.completed = s.last;
        Ok(())
    }

    pub(crate) fn mark(&self) -> FakeMark {
        FakeMark(self.last_seq)
    }

    /// Completes everything recorded up to `mark`, on every stream.
    pub(crate) fn complete_until(&mut self, mark: FakeMark) {
        for s in self.streams.values_mut() {
            s.completed = s.completed.max(mark.0.min(s.last));
        }
    }

    pub(crate) fn complete_all(&mut self) {
        self.complete_until(self.mark());
    }

    /// Events recorded whose work has not completed.
    pub(crate) fn pending_events(&self) -> usize {
        self.events
            .values()
            .flatten()
            .filter(|r| r.seq > self.streams[&r.stream].completed)
            .count()
    }

    /// Live (not destroyed) created streams, the default stream not counted.
    pub(crate) fn live_streams(&self) -> usize {
        self.streams
            .iter()
            .filter(|(&id, s)| id != 0 && !s.destroyed)
            .count()
    }

    pub(crate) fn live_events(&self) -> usize {
        self.events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_complete_in_order_and_independently() {
        let mut t = Timeline::new();
        let (s1, s2) = (t.create_stream(), t.create_stream());
        let (a, b, c) = (t.create_event(), t.create_event(), t.create_event());
        assert_eq!(t.query(a), Ok(true), "never recorded");
        t.record(a, s1).unwrap();
        t.record(b, s1).unwrap();
        t.record(c, s2).unwrap();
        assert_eq!(t.pending_events(), 3);
        t.complete(b).unwrap(); // completes `a` too: same stream, recorded earlier
        assert_eq!(
            (t.query(a), t.query(b), t.query(c)),
            (Ok(true), Ok(true), Ok(false))
        );
        t.record(a, s2).unwrap(); // recording again moves the event
        assert_eq!(t.query(a), Ok(false));
        let mark = t.mark();
        let d = t.create_event();
        t.record(d, 0).unwrap();
        t.complete_until(mark);
        assert_eq!(
            (t.query(a), t.query(c), t.query(d)),
            (Ok(true), Ok(true), Ok(false))
        );
        t.synchronize_stream(0).unwrap();
        assert_eq!(t.query(d), Ok(true));
        assert_eq!(t.pending_events(), 0);
    }

    #[test]
    fn bad_handles_are_refused() {
        let mut t = Timeline::new();
        let s = t.create_stream();
        let e = t.create_event();
        assert_eq!(t.destroy_stream(0), Err(BadHandle));
        t.record(e, s).unwrap();
        t.destroy_stream(s).unwrap();
        assert_eq!(t.destroy_stream(s), Err(BadHandle));
        assert_eq!(t.record(e, s), Err(BadHandle));
        assert_eq!(t.synchronize_stream(s), Err(BadHandle));
        assert_eq!(
            t.query(e),
            Ok(false),
            "work on a destroyed stream still completes later"
        );
        t.complete_stream(s).unwrap();
        assert_eq!(t.query(e), Ok(true));
        t.destroy_event(e).unwrap();
        assert_eq!(t.query(e), Err(BadHandle));
        assert_eq!(t.record(e, 0), Err(BadHandle));
        assert_eq!(t.destroy_event(e), Err(BadHandle));
        assert_eq!((t.live_streams(), t.live_events()), (0, 0));
    }
}
