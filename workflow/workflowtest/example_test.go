package workflowtest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/weirhq/weir/workflow"
	"github.com/weirhq/weir/workflow/workflowtest"
)

type ReminderArgs struct {
	Email string `json:"email"`
}

func (ReminderArgs) Kind() string { return "reminder" }

type SendEmailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func (SendEmailArgs) Kind() string { return "send_email" }

// ReminderWorkflow emails a reminder every week, four times.
type ReminderWorkflow struct {
	workflow.Defaults[ReminderArgs, int]
}

func (*ReminderWorkflow) Run(ctx workflow.Context, args ReminderArgs) (int, error) {
	sent := 0
	for week := 1; week <= 4; week++ {
		if err := workflow.Sleep(ctx, 7*24*time.Hour); err != nil {
			return sent, err
		}
		subject := fmt.Sprintf("week %d", week)
		if _, err := workflow.ExecuteActivity[string](ctx, SendEmailArgs{To: args.Email, Subject: subject}, nil).Get(ctx); err != nil {
			return sent, err
		}
		sent++
	}
	return sent, nil
}

// A month of workflow time runs in microseconds: timers fire on a fake clock.
func Example() {
	env := workflowtest.New(nil, nil)
	workflowtest.OnActivity(env, func(ctx context.Context, args SendEmailArgs) (string, error) {
		fmt.Println("email to", args.To+":", args.Subject, "on", env.Now().Format(time.DateOnly))
		return "sent", nil
	})
	sent, err := workflowtest.Execute(env, &ReminderWorkflow{}, ReminderArgs{Email: "ann@example.com"})
	fmt.Println(sent, err, env.Tasks(), "tasks")
	// Output:
	// email to ann@example.com: week 1 on 2026-01-08
	// email to ann@example.com: week 2 on 2026-01-15
	// email to ann@example.com: week 3 on 2026-01-22
	// email to ann@example.com: week 4 on 2026-01-29
	// 4 <nil> 9 tasks
}
