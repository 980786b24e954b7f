// Command bench measures weir against its peers on one Postgres server: raw
// River against River through weir's fencing driver (jobs), and weir against
// a River job chain, go-workflows and DBOS (workflows), plus what each
// costs per unit in transactions, round trips and WAL (costs).
//
//	go run . all --runs 3 --out results/$(date +%Y%m%d-%H%M%S)
//	go run . workflows --mode burst --contender weir,dbos-direct
//	go run . summarize results/<dir>/results.jsonl
//
// Every measurement prints one JSON line (a Result). With DATABASE_URL set,
// the harness creates and drops its databases on that server; otherwise it
// starts a private, durable Postgres (fsync on) in a temporary directory and
// stops it at the end. See README.md for the definitions.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
