// Package pgcluster runs a private Postgres server from the locally installed
// binaries: initdb into a directory the cluster owns, postgres on a loopback
// port, clean stop, crash and restart.
//
// It is what `weir dev` starts when no DATABASE_URL is given, what `make test`
// starts for the test run, and what fault-injection tests use when they need a
// server of their own to stop and restart.
//
// The server is a child process of the caller. It listens on 127.0.0.1 only and
// trusts local connections, so it is for development and tests, never for
// production data. When the caller is root, initdb and postgres run as an
// unprivileged user (postgres, else nobody), as Postgres refuses to run as root.
// On Linux the server receives SIGINT (a fast, clean shutdown) if its parent
// dies without stopping it.
package pgcluster
