package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// startTimeout bounds how long Start waits for the server to accept
	// connections, and CrashBackend for it to recover.
	startTimeout = 60 * time.Second

	// SuperuserDefault is the superuser role initdb creates.
	SuperuserDefault = "postgres"
)

// ErrNotRunning is returned by operations that need a running server.
var ErrNotRunning = errors.New("pgcluster: server is not running")

// ErrNotServerProcess is returned by CrashBackend for a process that is not
// a live server process of the cluster (it may have just exited).
var ErrNotServerProcess = errors.New("pgcluster: not a live server process")

// Config configures a Cluster. Only Dir is required.
type Config struct {
	// Dir is the directory the cluster owns: data/ (PGDATA), the socket and
	// postgres.log live under it. It is created if missing; a Dir that already
	// holds a cluster is reused, so a cluster survives restarts of the process
	// that runs it. Required.
	Dir string

	// Durable keeps fsync and full page writes on. Tests leave it off: it makes
	// initdb and commits much faster, and while a crash of Postgres itself
	// (Crash) still loses nothing committed, an OS crash could. Defaults to
	// false.
	Durable bool

	// Port is the TCP port on 127.0.0.1. Defaults to a free port chosen at the
	// first Start and kept for restarts, so URLs stay valid.
	Port int

	// Settings are extra server settings, passed as -c name=value.
	Settings map[string]string
}

// Cluster is a private Postgres server. Its methods are safe for concurrent use.
type Cluster struct {
	binDir  string
	config  Config
	cred    *syscall.Credential // non-nil when running as root
	dataDir string
	logPath string
	sockDir string

	temp bool // made by StartTemp: Close removes config.Dir

	mu   sync.Mutex
	proc *serverProcess
	port int
}

type serverProcess struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // the Wait error, set before done closes
}

// New checks the configuration and locates the binaries. It starts nothing.
func New(config *Config) (*Cluster, error) {
	if config == nil || config.Dir == "" {
		return nil, errors.New("pgcluster: Config.Dir is required")
	}
	cfg := *config
	binDir, err := FindBinDir()
	if err != nil {
		return nil, err
	}

	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving cluster dir %s: %w", cfg.Dir, err)
	}
	cfg.Dir = dir

	c := &Cluster{
		binDir:  binDir,
		config:  cfg,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
		sockDir: filepath.Join(dir, "run"),
		port:    cfg.Port,
	}

	if os.Geteuid() == 0 {
		cred, err := unprivilegedUser()
		if err != nil {
			return nil, err
		}
		c.cred = cred
	}
	return c, nil
}

// StartTemp starts a cluster of config (nil: the defaults; its Dir is
// ignored) in a new directory under the system temp dir, named after pattern
// as os.MkdirTemp names it. Close stops it and removes the directory.
func StartTemp(ctx context.Context, pattern string, config *Config) (*Cluster, error) {
	dir, err := TempDir(pattern)
	if err != nil {
		return nil, err
	}
	cfg := Config{}
	if config != nil {
		cfg = *config
	}
	cfg.Dir = dir
	c, err := New(&cfg)
	if err == nil {
		c.temp = true
		err = c.Start(ctx)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// TempDir makes a directory under the system temp dir that an unprivileged
// postgres user can reach (t.TempDir's directories are private to the test's
// user, which stops a root process from giving a cluster to postgres).
func TempDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", fmt.Errorf("making temp dir: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("opening temp dir %s: %w", dir, err)
	}
	return dir, nil
}

// Close stops the cluster as Stop does and, for one of StartTemp, removes
// its directory.
func (c *Cluster) Close(ctx context.Context) error {
	err := c.Stop(ctx)
	if c.temp {
		err = errors.Join(err, os.RemoveAll(c.config.Dir))
	}
	return err
}

// DataDir is the cluster's PGDATA.
func (c *Cluster) DataDir() string { return c.dataDir }

// LogPath is the server's log file.
func (c *Cluster) LogPath() string { return c.logPath }

// Port is the TCP port the server listens on (0 before the first Start
// when no Port was configured).
func (c *Cluster) Port() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.port
}

// URL is a connection URL for database on this server, as the superuser.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", SuperuserDefault, c.Port(), database)
}

// PID is the postmaster's process ID, or 0 when the server is not running.
func (c *Cluster) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.exited() {
		return 0
	}
	return c.proc.cmd.Process.Pid
}

// Start initialises the data directory if it holds no cluster, starts the
// server and waits until it accepts connections. Starting a running cluster is
// a no-op.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	if c.proc != nil && !c.proc.exited() {
		return nil
	}
	if err := c.prepareDirs(); err != nil {
		return err
	}
	if err := c.initdbIfNeeded(ctx); err != nil {
		return err
	}

	// A port picked here may be taken by someone else before postgres binds
	// it; when the port was ours to choose, try a fresh one.
	const attempts = 5
	var lastErr error
	for range attempts {
		pickedPort := false
		if c.port == 0 {
			port, err := freePort()
			if err != nil {
				return err
			}
			c.port, pickedPort = port, true
		}
		err := c.startProcess(ctx)
		if err == nil {
			return nil
		}
		lastErr = err
		if !pickedPort || !errors.Is(err, errPortInUse) {
			return err
		}
		c.port = 0
	}
	return lastErr
}

// Stop shuts the server down cleanly (fast mode: open sessions are
// terminated, everything committed is kept) and waits for it to exit.
// Stopping a stopped cluster is a no-op.
func (c *Cluster) Stop(ctx context.Context) error {
	return c.signalAndWait(ctx, syscall.SIGINT)
}

// Crash stops the server the way a power cut would look to Postgres
// (immediate shutdown: no checkpoint, crash recovery at the next Start).
func (c *Cluster) Crash(ctx context.Context) error {
	return c.signalAndWait(ctx, syscall.SIGQUIT)
}

// CrashBackend kills the server process pid, one of the postmaster's
// children (a backend: pg_backend_pid()), with SIGKILL, as an out-of-memory
// kill or a segfault would end it. The postmaster keeps running but ends
// every session and recovers from the crash in fresh shared memory
// (restart_after_crash, on by default); CrashBackend returns once the
// server accepts connections again. A pid that is not a live server process
// of the cluster (one that just exited, say) is ErrNotServerProcess, and
// nothing is signalled. Linux only.
func (c *Cluster) CrashBackend(ctx context.Context, pid int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	proc := c.proc
	if proc == nil || proc.exited() {
		return ErrNotRunning
	}
	postmaster := proc.cmd.Process.Pid
	// The process is told by its start time as well as its pid, so that a
	// pid reused by another process is never signalled nor waited for.
	child, err := liveChild(postmaster, pid)
	if err != nil {
		return err
	}
	if err := child.kill(); err != nil {
		return err
	}
	// The postmaster starts the crash reset when it reaps the process (a
	// zombie until then), so once the process is gone a server that
	// accepts connections is the recovered one.
	waitCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	ticker := time.NewTicker(5 * time.Millisecond)
	defer ticker.Stop()
	for child.exists() {
		select {
		case <-waitCtx.Done():
			return fmt.Errorf("waiting for postgres to reap server process %d: %w", pid, waitCtx.Err())
		case <-ticker.C:
		}
	}
	return c.waitReady(waitCtx, proc)
}

// Pause freezes the server (SIGSTOP to the postmaster and every backend):
// connections stay open but nothing answers, as in a network partition.
// Resume undoes it.
func (c *Cluster) Pause() error { return c.signalGroup(syscall.SIGSTOP) }

// Resume continues a paused server.
func (c *Cluster) Resume() error { return c.signalGroup(syscall.SIGCONT) }

func (c *Cluster) signalGroup(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || c.proc.exited() {
		return ErrNotRunning
	}
	return signalTree(c.proc.cmd.Process.Pid, sig)
}

// signalTree signals the postmaster and every process it forked. Backends
// call setsid(), so signalling the postmaster's process group is not enough.
// The postmaster goes first when stopping, so it cannot fork past the list.
func signalTree(pid int, sig syscall.Signal) error {
	pids := append([]int{pid}, childPIDs(pid)...)
	if sig == syscall.SIGCONT {
		slices.Reverse(pids) // children first, so none waits on a stopped parent
	}
	var errs []error
	for _, p := range pids {
		if err := syscall.Kill(p, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("sending %s to postgres process %d: %w", sig, p, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Cluster) signalAndWait(ctx context.Context, sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	proc := c.proc
	if proc == nil || proc.exited() {
		c.proc = nil
		return nil
	}
	// A paused server must run again to shut down.
	_ = signalTree(proc.cmd.Process.Pid, syscall.SIGCONT)
	if err := proc.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signalling postgres (pid %d): %w", proc.cmd.Process.Pid, err)
	}

	select {
	case <-proc.done:
		c.proc = nil
		return nil
	case <-ctx.Done():
	}

	// Out of patience: kill the whole tree so nothing is left behind.
	_ = signalTree(proc.cmd.Process.Pid, syscall.SIGKILL)
	<-proc.done
	c.proc = nil
	return fmt.Errorf("stopping postgres (pid %d) with %s: %w; killed it", proc.cmd.Process.Pid, sig, ctx.Err())
}

func (c *Cluster) prepareDirs() error {
	for _, dir := range []string{c.config.Dir, c.sockDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
	}
	if c.cred == nil {
		return nil
	}
	// Running as root: give the cluster's own directory to the unprivileged
	// user, and make sure that user can reach it.
	for _, path := range []string{c.config.Dir, c.sockDir} {
		if err := os.Chown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("handing %s to uid %d: %w", path, c.cred.Uid, err)
		}
	}
	for dir := filepath.Dir(c.config.Dir); ; dir = filepath.Dir(dir) {
		info, err := os.Stat(dir)
		if err != nil {
			return fmt.Errorf("checking %s: %w", dir, err)
		}
		if info.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pgcluster: %s is not searchable by others (mode %s), so uid %d cannot reach the cluster in %s; choose a Dir outside it",
				dir, info.Mode().Perm(), c.cred.Uid, c.config.Dir)
		}
		if dir == filepath.Dir(dir) {
			break
		}
	}
	return nil
}

func (c *Cluster) initdbIfNeeded(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return nil
	}
	// A half-made data dir from an interrupted initdb would make it fail.
	if err := os.RemoveAll(c.dataDir); err != nil {
		return fmt.Errorf("clearing partial data dir %s: %w", c.dataDir, err)
	}

	args := []string{
		"-D", c.dataDir,
		"-U", SuperuserDefault,
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
	}
	if !c.config.Durable {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "initdb"), args...)
	cmd.Env = childEnv()
	cmd.Dir = c.config.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("running initdb in %s: %w\n%s", c.dataDir, err, out)
	}
	return nil
}

var errPortInUse = errors.New("port in use")

func (c *Cluster) startProcess(ctx context.Context) error {
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(c.port),
		"unix_socket_directories": c.sockDir,
		"max_connections":         "300",
		"shared_buffers":          "128MB",
		"logging_collector":       "off",
	}
	if !c.config.Durable {
		settings["fsync"] = "off"
		settings["full_page_writes"] = "off"
	}
	maps.Copy(settings, c.config.Settings)

	args := []string{"-D", c.dataDir}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		args = append(args, "-c", name+"="+settings[name])
	}

	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("opening postgres log %s: %w", c.logPath, err)
	}
	logStart, _ := logFile.Seek(0, 2)

	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), args...) //nolint:noctx // the server outlives ctx
	cmd.Env = childEnv()
	cmd.Dir = c.config.Dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = serverSysProcAttr(c.cred)
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting postgres: %w", err)
	}
	proc := &serverProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		logFile.Close()
		close(proc.done)
	}()
	c.proc = proc

	waitCtx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := c.waitReady(waitCtx, proc); err != nil {
		_ = signalTree(cmd.Process.Pid, syscall.SIGKILL)
		<-proc.done
		c.proc = nil
		logTail := c.logSince(logStart)
		if strings.Contains(logTail, "could not bind") || strings.Contains(logTail, "Address already in use") {
			return fmt.Errorf("%w: starting postgres on port %d: %w\n%s", errPortInUse, c.port, err, logTail)
		}
		return fmt.Errorf("starting postgres on port %d: %w\n%s", c.port, err, logTail)
	}
	return nil
}

// waitReady polls until the server accepts a connection and answers a query.
func (c *Cluster) waitReady(ctx context.Context, proc *serverProcess) error {
	url := fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", SuperuserDefault, c.port)
	ticker := time.NewTicker(25 * time.Millisecond)
	defer ticker.Stop()
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			_, err = conn.Exec(ctx, "SELECT 1")
			conn.Close(context.WithoutCancel(ctx))
			if err == nil {
				return nil
			}
		}

		select {
		case <-proc.done:
			return fmt.Errorf("postgres exited during start-up: %v", proc.err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for postgres to accept connections: %w (last error: %v)", ctx.Err(), err)
		case <-ticker.C:
		}
	}
}

func (c *Cluster) logSince(offset int64) string {
	data, err := os.ReadFile(c.logPath)
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	data = data[offset:]
	const maxTail = 4000
	if len(data) > maxTail {
		data = data[len(data)-maxTail:]
	}
	return string(bytes.TrimSpace(data))
}

func (p *serverProcess) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// childEnv is the caller's environment without libpq variables (PGDATA,
// PGPORT, … would override what we pass) and with a locale that always exists.
func childEnv() []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=")
	})
	return append(env, "LANG=C", "LC_ALL=C")
}

// unprivilegedUser is who runs initdb and postgres when the caller is root
// (Postgres refuses to run as root): postgres if that user exists, else
// nobody.
func unprivilegedUser() (*syscall.Credential, error) {
	var lastErr error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			lastErr = err
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("parsing ids of user %s: %w", name, err)
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return nil, fmt.Errorf("pgcluster: running as root and no unprivileged user to run postgres as (tried postgres, nobody): %w", lastErr)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil //nolint:forcetypeassert // a tcp listener has a TCP address
}
