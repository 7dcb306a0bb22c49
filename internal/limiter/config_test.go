package limiter

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

func TestConfigWithDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.WithDefaults()
	if c.Name != DefaultName || c.Decrease != DefaultDecrease || c.Increase != DefaultIncrease ||
		c.LeaseWindow != DefaultLeaseWindow || c.PollInterval != DefaultPollInterval ||
		c.Recovery != DefaultRecovery || c.MaxHintPenalty != DefaultMaxHintPenalty ||
		c.Now == nil || c.Logger == nil || c.Floor != 0 {
		t.Errorf("Config{}.WithDefaults() = %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
	// Set fields are kept; a negative Recovery (the curve off) too.
	set := Config{Name: "x", Decrease: 0.7, Increase: 0.2, Recovery: -1, LeaseWindow: time.Second}.WithDefaults()
	if set.Name != "x" || set.Decrease != 0.7 || set.Increase != 0.2 || set.Recovery != -1 || set.LeaseWindow != time.Second {
		t.Errorf("WithDefaults changed set fields: %+v", set)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   Config
		field string // named in the error; empty: valid
	}{
		{"defaults", Config{}, ""},
		{"Floor negative", Config{Floor: -1}, "Floor"},
		{"Floor NaN", Config{Floor: math.NaN()}, "Floor"},
		{"Decrease 1", Config{Decrease: 1}, "Decrease"},
		{"Decrease above 1", Config{Decrease: 1.5}, "Decrease"},
		{"Decrease negative", Config{Decrease: -0.5}, "Decrease"},
		{"Decrease NaN", Config{Decrease: math.NaN()}, "Decrease"},
		{"Decrease in range", Config{Decrease: 0.9}, ""},
		{"Increase negative", Config{Increase: -0.1}, "Increase"},
		{"Increase NaN", Config{Increase: math.NaN()}, "Increase"},
		{"Increase infinite", Config{Increase: math.Inf(1)}, "Increase"},
		{"Increase above 1", Config{Increase: 2}, ""},
		{"LeaseWindow negative", Config{LeaseWindow: -time.Millisecond}, "LeaseWindow"},
		{"PollInterval negative", Config{PollInterval: -time.Millisecond}, "PollInterval"},
		{"MaxHintPenalty negative", Config{MaxHintPenalty: -time.Second}, "MaxHintPenalty"},
		{"Recovery negative: the curve off", Config{Recovery: -1}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.WithDefaults().validate()
			switch {
			case tt.field == "" && err != nil:
				t.Errorf("validate() = %v, want nil", err)
			case tt.field != "" && (err == nil || !strings.Contains(err.Error(), tt.field)):
				t.Errorf("validate() = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

func TestOpenRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{{Floor: -1}, {Decrease: 2}, {Increase: -1}} {
		if _, err := Open(context.Background(), nil, cfg); err == nil {
			t.Errorf("Open accepted %+v", cfg)
		}
	}
}
