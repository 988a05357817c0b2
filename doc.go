// Package client drives berth from any Go program, as the berth command
// does: standalone sandboxes (their operations are Workflow Updates),
// one-shot runs, their live output, and copies in and out of sandboxes
// of any size. It needs nothing but a Temporal client: outputs and
// transfers travel through the server, by way of the relay queries of
// package transfer, never through a path on a worker's disk.
//
// # Riding out a server restart
//
// Every operation keeps its Update id (or its request) and retries while
// the server is unavailable, for at most RetryFor, then fails with an
// *UnavailableError saying whether the operation may have run and how to
// see its result. An operation sent again with the same Update id is
// never run twice: the server answers it from the first one.
//
// # Errors
//
// The errors its calls return carry berth's error kinds (package
// errdefs), whatever Temporal wrapped them in: a program tests
//
//	if errdefs.KindOf(err) == errdefs.NotFound { ... }
//
// and errdefs/temporalerr.OneLine renders one in a line, as berth does.
//
// # Partial data
//
// An output that cannot be had whole is an error (ErrIncomplete), never
// a silent truncation: what could be had is written, and the error says
// how much is missing.
package berth
