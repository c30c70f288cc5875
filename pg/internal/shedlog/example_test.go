package shedlog_test

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/goddp/ddp/pg/internal/shedlog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// A flood of 1000 refused connections within one interval gives two
// lines: the first refusal, and at Close the count of the rest.
func Example() {
	enc := zapcore.NewConsoleEncoder(zapcore.EncoderConfig{MessageKey: "msg", LevelKey: "level",
		EncodeLevel: zapcore.LowercaseLevelEncoder, EncodeDuration: zapcore.StringDurationEncoder})
	log := zap.New(zapcore.NewCore(enc, zapcore.AddSync(os.Stdout), zap.InfoLevel))
	refusals := shedlog.New(log, "tcp: ", time.Hour)
	for i := range 1000 {
		refusals.Note("it failed the shared-secret handshake", fmt.Sprintf("10.0.0.%d:4000", i%3), errors.New("bad MAC"))
	}
	refusals.Close()
	fmt.Println(refusals.Count())
	// Output:
	// warn	tcp: refused connection: it failed the shared-secret handshake	{"remote": "10.0.0.0:4000", "error": "bad MAC", "next_report_in": "1h0m0s"}
	// warn	tcp: refused 999 more connections	{"reasons": "it failed the shared-secret handshake: 999", "from": "10.0.0.0: 333, 10.0.0.1: 333, 10.0.0.2: 333", "within": "1h0m0s"}
	// 1000
}
