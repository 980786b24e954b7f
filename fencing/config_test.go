package fencing

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

type configTestObserver struct{}

func (configTestObserver) FencingEvent(context.Context, *Event) {}

// TestConfigDefaults: a nil Config and every zero field take the documented
// defaults (LeaseTTL 30s, HeartbeatInterval LeaseTTL/3, ReaperInterval 5s),
// and the fields that are set are kept.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	onFinalized := func(context.Context, pgx.Tx, string, []int64) error { return nil }
	for _, tt := range []struct {
		name   string
		config *Config
		want   Config
	}{
		{"Nil", nil, Config{LeaseTTL: 30 * time.Second, HeartbeatInterval: 10 * time.Second, ReaperInterval: 5 * time.Second}},
		{"Zero", &Config{}, Config{LeaseTTL: 30 * time.Second, HeartbeatInterval: 10 * time.Second, ReaperInterval: 5 * time.Second}},
		{
			"LeaseTTLOnly", &Config{LeaseTTL: 9 * time.Second},
			Config{LeaseTTL: 9 * time.Second, HeartbeatInterval: 3 * time.Second, ReaperInterval: 5 * time.Second},
		},
		{
			"HeartbeatIntervalOnly", &Config{HeartbeatInterval: 2 * time.Second},
			Config{LeaseTTL: 30 * time.Second, HeartbeatInterval: 2 * time.Second, ReaperInterval: 5 * time.Second},
		},
		{
			"ReaperIntervalOnly", &Config{ReaperInterval: time.Second},
			Config{LeaseTTL: 30 * time.Second, HeartbeatInterval: 10 * time.Second, ReaperInterval: time.Second},
		},
		{
			"AllSet", &Config{LeaseTTL: time.Minute, HeartbeatInterval: 29 * time.Second, ReaperInterval: 7 * time.Second},
			Config{LeaseTTL: time.Minute, HeartbeatInterval: 29 * time.Second, ReaperInterval: 7 * time.Second},
		},
		{
			"MinimumLeaseTTL", &Config{LeaseTTL: 100 * time.Millisecond},
			Config{LeaseTTL: 100 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond / 3, ReaperInterval: 5 * time.Second},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var original Config
			if tt.config != nil {
				original = *tt.config
			}
			driver, err := NewDriver(nil, tt.config)
			require.NoError(t, err)
			got := *driver.config
			require.Equal(t, tt.want.LeaseTTL, got.LeaseTTL, "LeaseTTL")
			require.Equal(t, tt.want.HeartbeatInterval, got.HeartbeatInterval, "HeartbeatInterval")
			require.Equal(t, tt.want.ReaperInterval, got.ReaperInterval, "ReaperInterval")
			require.Nil(t, got.Observer)
			require.Nil(t, got.OnFinalized)
			if tt.config != nil {
				require.Equal(t, original, *tt.config, "the caller's Config is not modified")
			}
		})
	}
	require.Equal(t, 30*time.Second, LeaseTTLDefault)
	require.Equal(t, 5*time.Second, ReaperIntervalDefault)

	t.Run("KeepsHooks", func(t *testing.T) {
		t.Parallel()
		driver, err := NewDriver(nil, &Config{Observer: configTestObserver{}, OnFinalized: onFinalized})
		require.NoError(t, err)
		require.Equal(t, configTestObserver{}, driver.config.Observer)
		require.NotNil(t, driver.config.OnFinalized)
		require.Equal(t, LeaseTTLDefault, driver.config.LeaseTTL)
	})
}

// TestConfigValidation: every invalid combination is rejected with a
// *ConfigError that matches ErrInvalidConfig and names the field; the values
// at each boundary's valid side are accepted.
func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		config Config
		field  string // "" means valid
		value  time.Duration
	}{
		{"LeaseTTLBelowMinimum", Config{LeaseTTL: leaseTTLMin - time.Nanosecond}, "LeaseTTL", leaseTTLMin - time.Nanosecond},
		{"LeaseTTLTiny", Config{LeaseTTL: time.Nanosecond}, "LeaseTTL", time.Nanosecond},
		{"LeaseTTLNegative", Config{LeaseTTL: -time.Second}, "LeaseTTL", -time.Second},
		{"LeaseTTLAtMinimum", Config{LeaseTTL: leaseTTLMin}, "", 0},
		{"HeartbeatIntervalNegative", Config{HeartbeatInterval: -time.Second}, "HeartbeatInterval", -time.Second},
		{"HeartbeatIntervalNegativeWithLeaseTTL", Config{LeaseTTL: time.Minute, HeartbeatInterval: -time.Nanosecond}, "HeartbeatInterval", -time.Nanosecond},
		{"HeartbeatIntervalEqualsLeaseTTL", Config{LeaseTTL: 10 * time.Second, HeartbeatInterval: 10 * time.Second}, "HeartbeatInterval", 10 * time.Second},
		{"HeartbeatIntervalAboveLeaseTTL", Config{LeaseTTL: 10 * time.Second, HeartbeatInterval: time.Minute}, "HeartbeatInterval", time.Minute},
		{"HeartbeatIntervalHalfOfLeaseTTL", Config{LeaseTTL: 10 * time.Second, HeartbeatInterval: 5 * time.Second}, "HeartbeatInterval", 5 * time.Second},
		{"HeartbeatIntervalAboveDefaultLeaseTTL", Config{HeartbeatInterval: time.Minute}, "HeartbeatInterval", time.Minute},
		// 2*HeartbeatInterval overflows time.Duration: still rejected.
		{"HeartbeatIntervalHuge", Config{LeaseTTL: time.Minute, HeartbeatInterval: math.MaxInt64/2 + 1}, "HeartbeatInterval", math.MaxInt64/2 + 1},
		{"HeartbeatIntervalJustUnderHalf", Config{LeaseTTL: 10 * time.Second, HeartbeatInterval: 5*time.Second - time.Nanosecond}, "", 0},
		{"ReaperIntervalNegative", Config{ReaperInterval: -time.Second}, "ReaperInterval", -time.Second},
		{"ReaperIntervalNegativeOtherwiseValid", Config{LeaseTTL: time.Minute, HeartbeatInterval: time.Second, ReaperInterval: -time.Nanosecond}, "ReaperInterval", -time.Nanosecond},
		{"ReaperIntervalTiny", Config{ReaperInterval: time.Nanosecond}, "", 0},
		// The first invalid field, in LeaseTTL, HeartbeatInterval,
		// ReaperInterval order, is the one reported.
		{"SeveralInvalid", Config{LeaseTTL: -time.Second, HeartbeatInterval: -time.Second, ReaperInterval: -time.Second}, "LeaseTTL", -time.Second},
		{"HeartbeatAndReaperInvalid", Config{HeartbeatInterval: -time.Second, ReaperInterval: -time.Second}, "HeartbeatInterval", -time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			config := tt.config
			driver, err := NewDriver(nil, &config)
			if tt.field == "" {
				require.NoError(t, err)
				require.NotNil(t, driver)
				return
			}
			require.Nil(t, driver)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.False(t, errors.Is(err, ErrLeaseLost))
			var configErr *ConfigError
			require.ErrorAs(t, err, &configErr)
			require.Equal(t, tt.field, configErr.Field)
			require.Equal(t, tt.value, configErr.Value)
			require.NotEmpty(t, configErr.Reason)
			require.Contains(t, err.Error(), tt.field, "the message names the field")
			require.Contains(t, err.Error(), tt.value.String(), "the message gives the value")
		})
	}
}
