package main

import (
	"testing"

	"github.com/reconcile/reconcile/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
