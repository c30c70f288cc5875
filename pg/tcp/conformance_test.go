package tcp

import (
	"testing"

	"github.com/goddp/ddp/pg/pgtest"
)

func TestConformance(t *testing.T) { pgtest.Run(t, world) }
