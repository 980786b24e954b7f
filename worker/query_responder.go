package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/weirhq/weir/internal/history"
	"github.com/weirhq/weir/internal/replay"
	"github.com/weirhq/weir/internal/store"
)

const (
	// queryClaimBatch bounds the queries one claim takes.
	queryClaimBatch = 20

	// queryConcurrency bounds the queries a worker answers at once.
	queryConcurrency = 8

	// queryPollInterval is how often the responder looks for queries when
	// no notification arrives (a lost listener connection).
	queryPollInterval = time.Second

	// queryReclaimAfter lets another worker take a query whose claimer went
	// quiet (it died mid-answer).
	queryReclaimAfter = 5 * time.Second
)

// queryResponder answers queries for the workflow kinds and namespaces the
// worker serves: woken by the announcer's listener for new queries (or
// every queryPollInterval), it claims them (SKIP LOCKED, so
// workers share the load), replays each run and writes the answer.
type queryResponder struct {
	background
	w     *Worker
	wg    sync.WaitGroup
	slots chan struct{}
	wakes chan struct{} // see wake
}

func newQueryResponder(w *Worker) *queryResponder {
	return &queryResponder{slots: make(chan struct{}, queryConcurrency), wakes: make(chan struct{}, 1), w: w}
}

func (r *queryResponder) loop(ctx context.Context) {
	ticker := time.NewTicker(queryPollInterval)
	defer ticker.Stop()
	for {
		if err := r.claimAndAnswer(ctx); err != nil && ctx.Err() == nil {
			r.w.config.Logger.WarnContext(ctx, "weir: answering queries failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wakes:
		case <-ticker.C:
		}
	}
}

func (r *queryResponder) stop() {
	r.background.stop()
	r.wg.Wait()
}

// wake wakes the claim loop: a query was asked.
func (r *queryResponder) wake() {
	select {
	case r.wakes <- struct{}{}:
	default:
	}
}

func (r *queryResponder) claimAndAnswer(ctx context.Context) error {
	p := store.ClaimQueriesParams{
		Namespaces: r.w.config.Namespaces, WorkflowKinds: slices.Sorted(maps.Keys(r.w.workflows)),
		ReclaimAfter: queryReclaimAfter, Limit: queryClaimBatch,
	}
	for {
		claimed, err := r.w.store.ClaimQueries(ctx, r.w.pool, p)
		if err != nil {
			return fmt.Errorf("claiming queries: %w", err)
		}
		for _, q := range claimed {
			select {
			case r.slots <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			r.wg.Go(func() {
				defer func() { <-r.slots }()
				if err := r.answer(ctx, q); err != nil && ctx.Err() == nil {
					r.w.config.Logger.WarnContext(ctx, "weir: answering a query failed",
						slog.Int64("query_id", q.ID), slog.String("error", err.Error()))
				}
			})
		}
		if len(claimed) < queryClaimBatch {
			return nil
		}
	}
}

// answer replays the run and records the handler's answer (or failure).
func (r *queryResponder) answer(ctx context.Context, q store.ClaimedQuery) error {
	var (
		result     []byte
		failure    *history.Failure
		notStarted bool
	)
	err := pgx.BeginTxFunc(ctx, r.w.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		run, err := r.w.store.GetRun(ctx, tx, q.RunID)
		if err != nil {
			return err
		}
		def := r.w.workflows[run.Kind]
		if def == nil {
			return fmt.Errorf("workflow %s is not registered here", run.Kind)
		}
		events, err := r.w.store.History(ctx, tx, q.RunID)
		if err != nil {
			return err
		}
		if len(events) == 0 {
			// Its first task has not run yet, so its code has registered no
			// handler: answer once it has (its commit wakes the responders).
			notStarted = true
			return nil
		}
		answer, queryErr := replay.Query(ctx, def, &replay.QueryParams{
			Args: q.Args,
			ExecuteParams: replay.ExecuteParams{
				ActivityResultType: r.w.activityResultType,
				Codec:              r.w.config.Codec,
				DeadlockTimeout:    r.w.config.DeadlockTimeout,
				History:            events,
				Info:               replay.Info{Generation: run.Generation, Kind: run.Kind, RunID: q.RunID.String(), WorkflowID: run.WorkflowID},
				Logger:             r.w.config.Logger,
				Now:                time.Now(),
			},
			Kind: q.Kind,
		})
		switch {
		case errors.Is(queryErr, replay.ErrUnknownQuery):
			failure = &history.Failure{Message: queryErr.Error(), Type: "UnknownQuery"}
		case queryErr != nil:
			failure = replay.FailureFromError(queryErr)
		default:
			result = answer
		}
		return nil
	})
	if notStarted {
		return r.w.store.UnclaimQuery(ctx, r.w.pool, q.ID)
	}
	if err != nil {
		failure = &history.Failure{Message: err.Error(), Type: "QueryError"}
	}
	var failureJSON []byte
	if failure != nil {
		if failureJSON, err = json.Marshal(failure); err != nil {
			return err
		}
	}
	return r.w.store.AnswerQuery(ctx, r.w.pool, store.AnswerQueryParams{ID: q.ID, Result: result, Failure: failureJSON})
}
