package store

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(floodEnv); spec != "" {
		runIdleFlood(spec)
	}
	goleak.VerifyTestMain(m)
}
