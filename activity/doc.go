// Package activity is the API used inside activities: the typed Activity
// interface with its embeddable Defaults, the running attempt's Info,
// Heartbeat (with progress details a later attempt can resume from) and
// CompleteTx (commit an effect and the activity's outcome together, fenced,
// so the effect happens exactly once).
//
//	type ChargeArgs struct{ Order string `json:"order"` }
//
//	func (ChargeArgs) Kind() string { return "charge" } // also the River job kind
//
//	type ChargeActivity struct {
//		activity.Defaults[ChargeArgs, Charge]
//		Bank *Bank
//	}
//
//	func (a *ChargeActivity) Execute(ctx context.Context, args ChargeArgs) (Charge, error) {
//		return a.Bank.Charge(ctx, args.Order)
//	}
//
// Activities are River jobs: River supplies retries, timeouts and priorities;
// weir's fencing layer gives every attempt a lease, so an attempt that was
// recovered elsewhere can never record an outcome.
package activity
