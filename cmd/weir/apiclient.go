package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/weirhq/weir/server"
)

// Exit codes of the commands that talk to a server.
const (
	exitFailure       = 1 // anything else: network, internal, unavailable
	exitUsage         = 2 // a command-line mistake or invalid_argument / payload_too_large
	exitNotFound      = 3 // not_found
	exitConflict      = 4 // workflow_already_started, workflow_id_reuse, request_conflict, run_closed, schedule_already_exists
	exitAuth          = 5 // unauthenticated, permission_denied
	exitNotCompleted  = 6 // result: the run closed without completing
	exitStillRunning  = 7 // result: the wait ended before the run closed
	exitUnimplemented = 8 // the server does not support the call yet
)

const exitCodesHelp = `Exit codes: 0 success; 1 error (network, server); 2 usage or invalid argument;
3 not found; 4 conflict (already started, ID reuse, request conflict, run
closed, schedule exists); 5 unauthenticated or permission denied; 6 the run
closed without completing (result); 7 the wait ended with the run still
running (result); 8 not implemented by the server yet.`

// apiError is an error response of the server.
type apiError server.Error

// Error is the server's message: a sentence for people. The code and the
// data (IDs, fields) are in the body, which --json prints.
func (e *apiError) Error() string { return strings.TrimPrefix(e.Message, "weir: ") }

func (e *apiError) exitCode() int {
	switch e.Code {
	case server.CodeInvalidArgument, server.CodePayloadTooLarge:
		return exitUsage
	case server.CodeNotFound:
		return exitNotFound
	case server.CodeWorkflowAlreadyStarted, server.CodeWorkflowIDReuse, server.CodeRequestConflict, server.CodeRunClosed,
		server.CodeScheduleAlreadyExists:
		return exitConflict
	case server.CodeUnauthenticated, server.CodePermissionDenied:
		return exitAuth
	case server.CodeUnimplemented:
		return exitUnimplemented
	default:
		return exitFailure
	}
}

// apiClient calls a weir server's API.
type apiClient struct {
	address   string
	http      *http.Client
	namespace string
	token     string

	// jsonOut, when set (--json), receives the body of every response as
	// the server sent it.
	jsonOut io.Writer
}

// call is do, then with --json the response printed: printed reports that
// the command has nothing left to print.
func (c *apiClient) call(ctx context.Context, method, path string, query url.Values, body, out any) (printed bool, err error) {
	raw, err := c.do(ctx, method, path, query, body, out)
	if err != nil || c.jsonOut == nil {
		return false, err
	}
	return true, printJSON(c.jsonOut, raw)
}

// do sends a request and decodes a 2xx body into out (when not nil); it
// returns the raw body too, for --json.
func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body, out any) ([]byte, error) {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		reader = bytes.NewReader(data)
	}
	target := strings.TrimRight(c.address, "/") + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, reader)
	if err != nil {
		return nil, usageError(fmt.Errorf("bad --address %q: %w", c.address, err))
	}
	if body != nil || method != http.MethodGet {
		// weir dev without tokens takes API writes only as JSON.
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("calling the weir server at %s: %w", c.address, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the response of %s: %w", c.address, err)
	}
	if resp.StatusCode >= 300 {
		var errResp server.ErrorResponse
		if json.Unmarshal(data, &errResp) != nil || errResp.Error == nil {
			return nil, fmt.Errorf("%s %s: HTTP %d: %s", method, path, resp.StatusCode, bytes.TrimSpace(data))
		}
		if c.jsonOut != nil {
			fmt.Fprintln(c.jsonOut, string(bytes.TrimSpace(data)))
		}
		apiErr := (*apiError)(errResp.Error)
		return nil, &exitError{code: apiErr.exitCode(), err: apiErr}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("decoding the response of %s %s: %w", method, path, err)
		}
	}
	return data, nil
}

func (c *apiClient) workflowsPath() string {
	return "/api/v1/namespaces/" + url.PathEscape(c.namespace) + "/workflows"
}

func (c *apiClient) workflowPath(workflowID, suffix string) string {
	return c.workflowsPath() + "/" + url.PathEscape(workflowID) + suffix
}

// pageOpts are the paging flags of a list command.
type pageOpts struct {
	all    bool
	cursor string
	limit  int
}

func (o *pageOpts) addFlags(cmd *cobra.Command) {
	flags := cmd.Flags()
	flags.BoolVar(&o.all, "all", false, "follow the cursor through every page")
	flags.StringVar(&o.cursor, "cursor", "", "continue from a previous page")
	flags.IntVar(&o.limit, "limit", 0, "page size (default 100, at most 1000)")
}

// listPages GETs a list endpoint a page at a time from --cursor, passing
// each page P to add, which returns its next cursor; with --all it follows
// the cursors to the end. It returns the cursor after the last page fetched
// ("" at the end).
func listPages[P any](ctx context.Context, c *apiClient, path string, q url.Values, o *pageOpts, add func(page *P) string) (string, error) {
	if o.limit > 0 {
		q.Set("limit", strconv.Itoa(o.limit))
	}
	cursor := o.cursor
	for {
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page P
		if _, err := c.do(ctx, http.MethodGet, path, q, nil, &page); err != nil {
			return "", err
		}
		cursor = add(&page)
		if !o.all || cursor == "" {
			return cursor, nil
		}
	}
}

// printPage prints a list's rows as a table, and on stderr the cursor of
// the next page, if any.
func printPage(g *globals, rows [][]string, next string) error {
	if err := printTable(g, rows); err != nil {
		return err
	}
	if next != "" {
		fmt.Fprintf(g.stderr, "more: --cursor %s\n", next)
	}
	return nil
}
