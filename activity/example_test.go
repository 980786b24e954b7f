package activity_test

import (
	"context"
	"fmt"

	"github.com/weirhq/weir/activity"
)

type ResizeArgs struct {
	Image string `json:"image"`
}

func (ResizeArgs) Kind() string { return "resize_image" }

type ResizeActivity struct {
	activity.Defaults[ResizeArgs, string]
}

// Execute resumes from the last chunk an earlier attempt reported.
func (a *ResizeActivity) Execute(ctx context.Context, args ResizeArgs) (string, error) {
	start := 0
	if last, ok, err := activity.HeartbeatDetails[int](ctx); err == nil && ok {
		start = last + 1
	}
	for chunk := start; chunk < 4; chunk++ {
		// ... resize one chunk ...
		if err := activity.Heartbeat(ctx, chunk); err != nil {
			return "", err // the lease is lost: a newer attempt owns the job
		}
	}
	return args.Image + "@2x", nil
}

// Outside a worker an activity has no Info; inside one it tells whom it works for.
func ExampleGetInfo() {
	_, ok := activity.GetInfo(context.Background())
	fmt.Println("inside an activity:", ok)

	err := activity.Heartbeat(context.Background(), nil)
	fmt.Println(err)

	// Output:
	// inside an activity: false
	// activity: not inside an activity attempt run by a weir worker
}
