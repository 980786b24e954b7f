package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/weirhq/weir/weirtest"
	"github.com/weirhq/weir/worker"
)

// A replayer program checks recorded histories against today's code; Main
// does this for a binary of your own (`weir workflow replay --replayer`),
// RunMain the same with its input and output given. The history here comes
// from weirtest; in production it comes from `weir workflow history --json`
// or client.WriteHistoryJSON.
func ExampleReplayer_RunMain() {
	env := weirtest.NewEnv(nil, &weirtest.EnvConfig{WorkflowID: "welcome-1"})
	weirtest.RegisterActivity(env, &GreetActivity{})
	if _, err := weirtest.ExecuteWorkflow(env, &WelcomeWorkflow{}, WelcomeArgs{Names: []string{"Ann", "Bo"}}); err != nil {
		panic(err)
	}
	var history bytes.Buffer
	if err := env.WriteHistoryJSON(&history); err != nil {
		panic(err)
	}

	r, err := worker.NewReplayer(nil)
	if err != nil {
		panic(err)
	}
	worker.AddReplayerWorkflow(r, &WelcomeWorkflow{})
	code := r.RunMain(context.Background(), nil, &history, os.Stdout, os.Stderr)
	fmt.Println("exit", code)
	// Output:
	// stdin: ok: workflow welcome-1 run 3a779a4b-3d36-59eb-ac1d-db57715c0e7d (welcome), 9 events, closed
	// exit 0
}
