//! The fake device's notion of time: streams, the work and events queued on them, which of it
//! has completed, what each stream's later work is ordered after, and CUDA graph capture.
//!
//! Two ways for work to complete:
//!
//! - **By hand** (no clock, the default): nothing completes by itself; the test says when
//!   ([`FakeDriver::complete`](super::FakeDriver::complete) and its kin), or a synchronising
//!   call does (on a real device it would have waited until then).
//! - **By a clock** ([`FakeClock`]): the host has a clock that every driver call and
//!   [`FakeDriver::advance_host`](super::FakeDriver::advance_host) moves on; each stream has a
//!   device clock, the time its queued work ends. Work queued with
//!   [`FakeDriver::launch`](super::FakeDriver::launch) starts when both the host has queued it
//!   and the stream has finished what came before, and takes the time it was given; a
//!   device-side wait (`cuStreamWaitEvent`) makes the stream's later work start no earlier than
//!   the event's point; a host synchronisation moves the host clock to the end of what it waits
//!   for and counts the difference as a stall. Work has completed once the host clock has
//!   passed its end.
//!
//! Either way, completing work completes what it was ordered after: everything before it on its
//! stream, and, through device-side waits, the events those waited for.

use std::collections::{HashMap, VecDeque};

use super::engines::Engines;

/// Each piece of work queued (a launch, an event record, a device-side wait) gets the next
/// sequence number, across all streams, so "all work queued so far" is one number (a
/// [`FakeMark`]).
///
/// Invariants: stream 0 (the default stream) always exists; every recorded event names a
/// stream in `streams` (destroyed streams stay, flagged, until their work is done); work
/// queued at `seq` on stream `s` has completed iff `seq <= streams[s].completed`; a stream's
/// `queue` holds, oldest first, exactly its work after `completed`; `deps` of a stream names,
/// for other streams, the latest of their work its later work is ordered after (a vector
/// clock).
#[derive(Debug)]
pub(crate) struct Timeline {
    last_seq: u64,
    next_stream: u64,
    next_event: u64,
    next_capture: u64,
    streams: HashMap<u64, StreamState>,
    events: HashMap<u64, Option<Recorded>>,
    clock: Option<FakeClock>,
    /// The device's engines (clock mode with `engines > 0`).
    engines: Option<Engines>,
    /// Host nanoseconds (clock mode).
    host_ns: u64,
    /// Host nanoseconds spent blocked in synchronisations (clock mode).
    stall_ns: u64,
}

#[derive(Clone, Debug, Default)]
struct StreamState {
    /// Work queued on the stream up to this sequence number has completed.
    completed: u64,
    /// The sequence number of the last work queued on the stream.
    last: u64,
    destroyed: bool,
    /// Work queued and not completed, oldest first.
    queue: VecDeque<Work>,
    /// Device time at which the stream's queued work ends (clock mode).
    end_ns: u64,
    /// Other streams' work this stream's later work is ordered after: (stream, seq).
    deps: Vec<(u64, u64)>,
    /// The capture sequence the stream is in, if capturing.
    capture: Option<CaptureState>,
}

#[derive(Clone, Copy, Debug)]
struct Work {
    seq: u64,
    end_ns: u64,
    /// For a device-side wait: the event's point, completed before this.
    after: Option<(u64, u64)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CaptureState {
    id: u64,
    invalidated: bool,
}

#[derive(Clone, Debug)]
struct Recorded {
    stream: u64,
    seq: u64,
    end_ns: u64,
    /// What the recording stream's work was ordered after at the record.
    deps: Vec<(u64, u64)>,
    /// The capture the event was recorded in, if its stream was capturing: such an event
    /// stands for a node of the graph, not a point of the timeline.
    captured: Option<u64>,
}

/// A point in the fake device's timeline: everything queued before it was taken (see
/// [`FakeDriver::mark`](super::FakeDriver::mark)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FakeMark(pub(crate) u64);

/// A point of one stream: the work queued on it up to then (see
/// [`FakeDriver::launch`](super::FakeDriver::launch) and
/// [`FakeDriver::ordered_after`](super::FakeDriver::ordered_after)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FakePoint {
    pub(crate) stream: u64,
    pub(crate) seq: u64,
}

/// The clock of a [`FakeDriver`](super::FakeDriver): how much host time its calls take. The
/// device's time is what the caller queues ([`FakeDriver::launch`](super::FakeDriver::launch)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FakeClock {
    /// Host nanoseconds every driver call takes (events, streams, queries; the host side of a
    /// synchronisation, before its wait).
    pub call_ns: u64,
    /// Host nanoseconds a call that obtains, maps or gives back device memory takes
    /// (`cuMemAlloc`, `cuMemFree`, `cuMemCreate`, `cuMemRelease`, `cuMemMap`, `cuMemUnmap`,
    /// `cuMemSetAccess`, `cuMemAddressReserve`, `cuMemAddressFree`).
    pub memory_call_ns: u64,
    /// How many kernels the device runs at once at full speed (see `engines.rs`): 1, a device
    /// whose streams share its throughput (kernels that fill it, or share its memory
    /// bandwidth); 0, every stream at full speed at once (no sharing at all).
    pub engines: u32,
}

impl FakeClock {
    /// Figures of the order of a current driver's calls: 1 µs for an event or stream call, 20
    /// µs for one that changes device memory; one engine (the streams share the device).
    pub const DEFAULT: FakeClock = FakeClock {
        call_ns: 1_000,
        memory_call_ns: 20_000,
        engines: 1,
    };
}

/// What the clock says (see [`FakeDriver::clock_report`](super::FakeDriver::clock_report)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ClockReport {
    /// The host clock now, in nanoseconds.
    pub host_ns: u64,
    /// Host nanoseconds spent blocked in synchronisations: for each, how long the device still
    /// had to run then.
    pub stall_ns: u64,
    /// When everything queued so far will have completed: the host clock, or the last
    /// stream's end if later.
    pub drained_ns: u64,
}

/// Why a timeline operation was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The handle does not exist (any more).
    BadHandle,
    /// Illegal while a stream captures a graph (`CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED`); the
    /// captures under way are invalidated.
    Capturing,
    /// A wait across a capture's boundary (`CUDA_ERROR_STREAM_CAPTURE_ISOLATION`).
    Isolation,
    /// Querying or synchronising an event recorded in a capture (`CUDA_ERROR_CAPTURED_EVENT`).
    CapturedEvent,
}

/// Sets `deps[stream]` to at least `seq`.
fn raise(deps: &mut Vec<(u64, u64)>, stream: u64, seq: u64) {
    match deps.iter_mut().find(|(s, _)| *s == stream) {
        Some((_, q)) => *q = (*q).max(seq),
        None => deps.push((stream, seq)),
    }
}

impl Timeline {
    pub(crate) fn new(clock: Option<FakeClock>) -> Timeline {
        let mut streams = HashMap::new();
        streams.insert(0, StreamState::default());
        Timeline {
            last_seq: 0,
            next_stream: 1,
            next_event: 1,
            next_capture: 1,
            streams,
            events: HashMap::new(),
            clock,
            engines: clock
                .filter(|c| c.engines > 0)
                .map(|c| Engines::new(c.engines)),
            host_ns: 0,
            stall_ns: 0,
        }
    }

    fn live_stream(&mut self, stream: u64) -> Result<&mut StreamState, Refused> {
        match self.streams.get_mut(&stream) {
            Some(s) if !s.destroyed => Ok(s),
            _ => Err(Refused::BadHandle),
        }
    }

    /// Whether any stream is capturing (in the global mode every capture here has: illegal
    /// calls fail on every thread).
    fn capturing(&self) -> bool {
        self.streams.values().any(|s| s.capture.is_some())
    }

    /// Refuses a call that is illegal while a capture is under way, invalidating every capture
    /// (as an unsafe call does to a global-mode capture).
    fn refuse_during_capture(&mut self) -> Result<(), Refused> {
        if !self.capturing() {
            return Ok(());
        }
        for s in self.streams.values_mut() {
            if let Some(c) = &mut s.capture {
                c.invalidated = true;
            }
        }
        Err(Refused::Capturing)
    }

    // --- the host clock ---------------------------------------------------------------------

    /// Moves the host clock on by a call's cost (clock mode).
    pub(crate) fn host_call(&mut self, memory: bool) {
        if let Some(c) = self.clock {
            self.host_ns += if memory { c.memory_call_ns } else { c.call_ns };
        }
    }

    /// Moves the host clock on by `ns`.
    pub(crate) fn advance_host(&mut self, ns: u64) {
        self.host_ns += ns;
    }

    /// The host waits until device time `until` (clock mode): the stall is counted.
    fn wait_host(&mut self, until: u64) {
        if self.clock.is_some() && until > self.host_ns {
            self.stall_ns += until - self.host_ns;
            self.host_ns = until;
        }
    }

    /// Completes every stream's work that has ended by the host clock (clock mode).
    fn settle(&mut self) {
        if self.clock.is_none() {
            return;
        }
        let now = self.host_ns;
        let done: Vec<(u64, u64)> = self
            .streams
            .iter()
            .filter_map(|(&id, s)| {
                let last_done = s.queue.iter().take_while(|w| w.end_ns <= now).last()?;
                Some((id, last_done.seq))
            })
            .collect();
        for (id, seq) in done {
            self.complete_to(id, seq);
        }
    }

    pub(crate) fn report(&self) -> ClockReport {
        let end = self.streams.values().map(|s| s.end_ns).max().unwrap_or(0);
        ClockReport {
            host_ns: self.host_ns,
            stall_ns: self.stall_ns,
            drained_ns: self.host_ns.max(end),
        }
    }

    // --- streams and work -------------------------------------------------------------------

    pub(crate) fn create_stream(&mut self) -> u64 {
        let id = self.next_stream;
        self.next_stream += 1;
        self.streams.insert(id, StreamState::default());
        id
    }

    /// Destroys a created stream; its queued work still completes.
    pub(crate) fn destroy_stream(&mut self, stream: u64) -> Result<(), Refused> {
        if stream == 0 {
            return Err(Refused::BadHandle);
        }
        self.live_stream(stream)?.destroyed = true;
        Ok(())
    }

    /// Queues work on a live stream: `ns` of device time once the host has queued it and the
    /// stream has finished what came before. Work on a capturing stream goes into the graph
    /// and runs only when the graph is launched, which is not modelled: it takes no time here.
    pub(crate) fn launch(&mut self, stream: u64, ns: u64) -> Result<FakePoint, Refused> {
        let host = self.host_ns;
        let seq = self.last_seq + 1;
        let s = self.live_stream(stream)?;
        let ns = if s.capture.is_some() { 0 } else { ns };
        let ready = s.end_ns.max(host);
        let end = match &mut self.engines {
            Some(e) => e.place(host, ready, ns),
            None => ready + ns,
        };
        let s = self.live_stream(stream)?;
        s.end_ns = end;
        s.last = seq;
        let end_ns = s.end_ns;
        s.queue.push_back(Work {
            seq,
            end_ns,
            after: None,
        });
        self.last_seq = seq;
        Ok(FakePoint { stream, seq })
    }

    /// The point of everything queued on `stream` so far.
    pub(crate) fn point(&self, stream: u64) -> Result<FakePoint, Refused> {
        let s = self.streams.get(&stream).ok_or(Refused::BadHandle)?;
        Ok(FakePoint {
            stream,
            seq: s.last,
        })
    }

    /// Whether work queued on `stream` from now on runs after the work up to `point`: the
    /// point is on the same stream, or has completed, or the stream waited (directly or
    /// through other streams' waits) for an event recorded at or after it.
    pub(crate) fn ordered_after(&mut self, stream: u64, point: FakePoint) -> bool {
        self.settle();
        if stream == point.stream {
            return true;
        }
        let done = self
            .streams
            .get(&point.stream)
            .is_some_and(|s| s.completed >= point.seq);
        done || self.streams.get(&stream).is_some_and(|s| {
            s.deps
                .iter()
                .any(|&(t, q)| t == point.stream && q >= point.seq)
        })
    }

    /// Completes everything queued on a live stream: the host waits for it.
    pub(crate) fn synchronize_stream(&mut self, stream: u64) -> Result<(), Refused> {
        let s = self.live_stream(stream)?;
        let (end, last) = (s.end_ns, s.last);
        self.refuse_during_capture()?;
        self.wait_host(end);
        self.complete_to(stream, last);
        Ok(())
    }

    /// Completes everything queued on every stream: the host waits for the device.
    pub(crate) fn synchronize_all(&mut self) -> Result<(), Refused> {
        self.refuse_during_capture()?;
        let end = self.streams.values().map(|s| s.end_ns).max().unwrap_or(0);
        self.wait_host(end);
        self.complete_all();
        Ok(())
    }

    // --- events -----------------------------------------------------------------------------

    pub(crate) fn create_event(&mut self) -> u64 {
        let id = self.next_event;
        self.next_event += 1;
        self.events.insert(id, None);
        id
    }

    pub(crate) fn destroy_event(&mut self, event: u64) -> Result<(), Refused> {
        self.events
            .remove(&event)
            .map(drop)
            .ok_or(Refused::BadHandle)
    }

    pub(crate) fn record(&mut self, event: u64, stream: u64) -> Result<(), Refused> {
        if !self.events.contains_key(&event) {
            return Err(Refused::BadHandle);
        }
        let seq = self.last_seq + 1;
        let host = self.host_ns;
        let s = self.live_stream(stream)?;
        let captured = s.capture.map(|c| c.id);
        s.end_ns = s.end_ns.max(host);
        s.last = seq;
        let (end_ns, deps) = (s.end_ns, s.deps.clone());
        s.queue.push_back(Work {
            seq,
            end_ns,
            after: None,
        });
        self.last_seq = seq;
        self.events.insert(
            event,
            Some(Recorded {
                stream,
                seq,
                end_ns,
                deps,
                captured,
            }),
        );
        Ok(())
    }

    /// The event's recording, if it was recorded outside a capture; refused for one recorded
    /// in a capture.
    fn recorded(&self, event: u64) -> Result<Option<&Recorded>, Refused> {
        match self.events.get(&event).ok_or(Refused::BadHandle)? {
            Some(r) if r.captured.is_some() => Err(Refused::CapturedEvent),
            r => Ok(r.as_ref()),
        }
    }

    /// Whether the event's work has completed (an event never recorded has).
    pub(crate) fn query(&mut self, event: u64) -> Result<bool, Refused> {
        self.recorded(event)?;
        self.refuse_during_capture()?;
        self.settle();
        Ok(match self.recorded(event)? {
            None => true,
            Some(r) => r.seq <= self.streams[&r.stream].completed,
        })
    }

    /// The host waits for the event's work.
    pub(crate) fn synchronize_event(&mut self, event: u64) -> Result<(), Refused> {
        self.recorded(event)?;
        self.refuse_during_capture()?;
        if let Some(r) = self.recorded(event)?.cloned() {
            self.wait_host(r.end_ns);
            self.complete_to(r.stream, r.seq);
        }
        Ok(())
    }

    /// Makes `stream`'s later work wait for the event's point, on the device.
    pub(crate) fn wait_event(&mut self, stream: u64, event: u64) -> Result<(), Refused> {
        let rec = self.events.get(&event).ok_or(Refused::BadHandle)?.clone();
        let seq = self.last_seq + 1;
        let s = self.live_stream(stream)?;
        let here = s.capture.map(|c| c.id);
        let Some(r) = rec else {
            return Ok(()); // never recorded: nothing to wait for
        };
        if r.captured != here {
            // A wait from a capture on work outside it, or the other way round.
            if let Some(c) = &mut s.capture {
                c.invalidated = true;
            }
            return Err(Refused::Isolation);
        }
        if here.is_some() {
            return Ok(()); // an edge of the graph, not of the timeline
        }
        s.end_ns = s.end_ns.max(r.end_ns);
        s.last = seq;
        let end_ns = s.end_ns;
        s.queue.push_back(Work {
            seq,
            end_ns,
            after: Some((r.stream, r.seq)),
        });
        for &(t, q) in &r.deps {
            raise(&mut s.deps, t, q);
        }
        raise(&mut s.deps, r.stream, r.seq);
        self.last_seq = seq;
        Ok(())
    }

    // --- completing by hand -----------------------------------------------------------------

    /// Completes `stream`'s work up to `seq`, and first what that work was ordered after.
    fn complete_to(&mut self, stream: u64, seq: u64) {
        loop {
            let Some(s) = self.streams.get_mut(&stream) else {
                return;
            };
            let Some(&w) = s.queue.front() else { break };
            if w.seq > seq {
                break;
            }
            s.queue.pop_front();
            if let Some((t, q)) = w.after {
                self.complete_to(t, q);
            }
        }
        if let Some(s) = self.streams.get_mut(&stream) {
            s.completed = s.completed.max(seq.min(s.last));
        }
    }

    /// Completes the event's work, and with it everything it was ordered after.
    pub(crate) fn complete(&mut self, event: u64) -> Result<(), Refused> {
        let rec = self.events.get(&event).ok_or(Refused::BadHandle)?;
        if let Some(r) = rec.clone() {
            if !self.streams.contains_key(&r.stream) {
                return Err(Refused::BadHandle);
            }
            self.complete_to(r.stream, r.seq);
        }
        Ok(())
    }

    /// Completes everything queued on a stream, destroyed or not.
    pub(crate) fn complete_stream(&mut self, stream: u64) -> Result<(), Refused> {
        let last = self.streams.get(&stream).ok_or(Refused::BadHandle)?.last;
        self.complete_to(stream, last);
        Ok(())
    }

    pub(crate) fn mark(&self) -> FakeMark {
        FakeMark(self.last_seq)
    }

    /// Completes everything queued up to `mark`, on every stream.
    pub(crate) fn complete_until(&mut self, mark: FakeMark) {
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            let upto = self.streams[&id]
                .queue
                .iter()
                .take_while(|w| w.seq <= mark.0)
                .last()
                .map(|w| w.seq);
            if let Some(seq) = upto {
                self.complete_to(id, seq);
            }
        }
    }

    pub(crate) fn complete_all(&mut self) {
        self.complete_until(self.mark());
    }

    /// Events recorded (outside a capture) whose work has not completed.
    pub(crate) fn pending_events(&self) -> usize {
        self.events
            .values()
            .flatten()
            .filter(|r| r.captured.is_none() && r.seq > self.streams[&r.stream].completed)
            .count()
    }

    // --- graph capture ----------------------------------------------------------------------

    /// Starts capturing `stream` (global mode); returns the capture's id.
    pub(crate) fn begin_capture(&mut self, stream: u64) -> Result<u64, Refused> {
        let id = self.next_capture;
        let s = self.live_stream(stream)?;
        if stream == 0 || s.capture.is_some() {
            return Err(Refused::Capturing);
        }
        s.capture = Some(CaptureState {
            id,
            invalidated: false,
        });
        self.next_capture += 1;
        Ok(id)
    }

    /// Ends `stream`'s capture; `Ok(false)` when an illegal call invalidated it.
    pub(crate) fn end_capture(&mut self, stream: u64) -> Result<bool, Refused> {
        let s = self.live_stream(stream)?;
        let c = s.capture.take().ok_or(Refused::BadHandle)?;
        Ok(!c.invalidated)
    }

    /// The stream's capture: `None`, or its id and whether it was invalidated.
    pub(crate) fn capture(&self, stream: u64) -> Result<Option<(u64, bool)>, Refused> {
        match self.streams.get(&stream) {
            Some(s) if !s.destroyed => Ok(s.capture.map(|c| (c.id, c.invalidated))),
            _ => Err(Refused::BadHandle),
        }
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
    use Refused::BadHandle;

    #[test]
    fn streams_complete_in_order_and_independently() {
        let mut t = Timeline::new(None);
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
        let mut t = Timeline::new(None);
        let s = t.create_stream();
        let e = t.create_event();
        assert_eq!(t.destroy_stream(0), Err(BadHandle));
        t.record(e, s).unwrap();
        t.destroy_stream(s).unwrap();
        assert_eq!(t.destroy_stream(s), Err(BadHandle));
        assert_eq!(t.record(e, s), Err(BadHandle));
        assert_eq!(t.synchronize_stream(s), Err(BadHandle));
        assert_eq!(t.wait_event(s, e), Err(BadHandle));
        assert_eq!(t.launch(s, 1), Err(BadHandle));
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

    #[test]
    fn a_device_wait_orders_a_stream_after_the_event_and_completes_with_it() {
        let mut t = Timeline::new(None);
        let (s1, s2, s3) = (t.create_stream(), t.create_stream(), t.create_stream());
        let used = t.launch(s1, 0).unwrap();
        assert!(!t.ordered_after(s2, used));
        assert!(
            t.ordered_after(s1, used),
            "a stream is ordered after itself"
        );
        let e = t.create_event();
        t.record(e, s1).unwrap();
        let later = t.launch(s1, 0).unwrap();
        t.wait_event(s2, e).unwrap();
        assert!(t.ordered_after(s2, used));
        assert!(!t.ordered_after(s2, later), "only up to the event's point");
        // Transitively: s3 waits for an event s2 recorded after its wait.
        let f = t.create_event();
        t.record(f, s2).unwrap();
        assert!(!t.ordered_after(s3, used));
        t.wait_event(s3, f).unwrap();
        assert!(t.ordered_after(s3, used));
        // Completing s3 by hand completes what it waited for, and nothing after it on s1.
        t.complete_stream(s3).unwrap();
        assert_eq!(t.query(e), Ok(true));
        assert!(t.ordered_after(s2, used));
        let g = t.create_event();
        t.record(g, s1).unwrap();
        assert_eq!(t.query(g), Ok(false));
        let _ = later;
    }

    #[test]
    fn the_clock_runs_work_after_the_host_queues_it_and_after_waits() {
        let clock = FakeClock {
            call_ns: 0,
            memory_call_ns: 0,
            engines: 0,
        };
        let mut t = Timeline::new(Some(clock));
        let (s1, s2) = (t.create_stream(), t.create_stream());
        t.launch(s1, 100).unwrap(); // 0..100
        let e = t.create_event();
        t.record(e, s1).unwrap(); // at 100
        t.advance_host(10);
        t.launch(s2, 5).unwrap(); // 10..15
        t.wait_event(s2, e).unwrap();
        let p = t.launch(s2, 5).unwrap(); // 100..105
        assert_eq!(t.report().drained_ns, 105);
        assert_eq!(t.query(e), Ok(false));
        t.advance_host(90); // host at 100
        assert_eq!(t.query(e), Ok(true));
        assert!(!t.ordered_after(s1, p) || p.stream == s1);
        t.synchronize_stream(s2).unwrap(); // the host waits 5 ns
        assert_eq!(t.report().stall_ns, 5);
        assert_eq!(t.report().host_ns, 105);
        t.synchronize_all().unwrap();
        assert_eq!(t.report().stall_ns, 5, "nothing left to wait for");
    }

    #[test]
    fn captures_refuse_what_is_illegal_during_them() {
        let mut t = Timeline::new(None);
        let (s1, s2) = (t.create_stream(), t.create_stream());
        let outside = t.create_event();
        t.record(outside, s2).unwrap();
        let id = t.begin_capture(s1).unwrap();
        assert_eq!(t.capture(s1), Ok(Some((id, false))));
        assert_eq!(t.capture(s2), Ok(None));
        let inside = t.create_event();
        t.record(inside, s1).unwrap();
        assert_eq!(t.wait_event(s1, outside), Err(Refused::Isolation));
        assert_eq!(t.query(outside), Err(Refused::Capturing));
        assert_eq!(t.synchronize_stream(s2), Err(Refused::Capturing));
        assert_eq!(t.synchronize_all(), Err(Refused::Capturing));
        assert_eq!(
            t.end_capture(s1),
            Ok(false),
            "the illegal calls invalidated it"
        );
        assert_eq!(t.query(inside), Err(Refused::CapturedEvent));
        assert_eq!(t.query(outside), Ok(false));
        t.begin_capture(s1).unwrap();
        assert_eq!(t.end_capture(s1), Ok(true));
    }
}
