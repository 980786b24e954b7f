package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weirhq/weir/internal/dbtest"
)

func TestServerCommand(t *testing.T) {
	t.Parallel()

	t.Run("RefusesWithoutTokens", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		code := runEnv(t.Context(), []string{"server"}, &stdout, &stderr, func(string) string { return "" })
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr.String(), "WEIR_TOKENS")

		env := map[string]string{"WEIR_TOKENS": "ci:write:*:short", "WEIR_MAX_WAIT": "forever"}
		code = runEnv(t.Context(), []string{"server"}, &stdout, &stderr, func(name string) string { return env[name] })
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr.String(), "WEIR_MAX_WAIT")
	})

	t.Run("HelpDocumentsConfiguration", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, runEnv(t.Context(), []string{"server", "--help"}, &stdout, &stderr, func(string) string { return "" }))
		for _, env := range []string{"WEIR_ADDR", "WEIR_TOKENS", "WEIR_MAX_BODY_BYTES", "WEIR_MAX_WAIT", "WEIR_REQUEST_TIMEOUT", "WEIR_MIGRATE", "DATABASE_URL", "WEIR_SCHEMA"} {
			require.Contains(t, stdout.String(), env)
		}
	})

	t.Run("ServesWithTokensAndStopsOnSIGTERM", func(t *testing.T) {
		t.Parallel()
		const secret = "process-secret-0123456789"
		cmd := exec.Command(weirBinary(t), "server", "--addr", "127.0.0.1:0", "--migrate") //nolint:noctx // signalled by the test
		cmd.Env = append(os.Environ(), "DATABASE_URL="+dbtest.TestDatabase(t.Context(), t), "WEIR_TOKENS=ops:read:default:"+secret)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill() })

		output := &lockedBuffer{}
		baseURL := make(chan string, 1)
		scanDone := make(chan struct{})
		go func() {
			defer close(scanDone)
			scanner := bufio.NewScanner(stdout)
			serveRE := regexp.MustCompile(`serving (http://\S+)`)
			for scanner.Scan() {
				output.WriteString(scanner.Text() + "\n")
				if m := serveRE.FindStringSubmatch(scanner.Text()); m != nil {
					baseURL <- m[1]
				}
			}
		}()
		var url string
		select {
		case url = <-baseURL:
		case <-scanDone:
			t.Fatalf("weir server exited:\n%s\n%s", output.String(), stderr.String())
		case <-time.After(2 * time.Minute):
			t.Fatalf("weir server did not serve:\n%s", stderr.String())
		}

		get := func(path, token string) int {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+path, nil)
			require.NoError(t, err)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.StatusCode
		}
		require.Equal(t, http.StatusOK, get("/readyz", ""))
		require.Equal(t, http.StatusOK, get("/metrics", ""))
		require.Equal(t, http.StatusUnauthorized, get("/api/v1/namespaces/default/workflows", ""))
		require.Equal(t, http.StatusOK, get("/api/v1/namespaces/default/workflows", secret))
		require.Equal(t, http.StatusForbidden, get("/api/v1/namespaces/other/workflows", secret))

		require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, stderr.String())
		case <-time.After(time.Minute):
			t.Fatal("weir server did not exit")
		}
		<-scanDone
		require.Contains(t, output.String(), "weir server: stopped")
	})
}
