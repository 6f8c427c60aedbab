package main

import (
	"testing"

	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
)

// TestMain lets this binary serve as the shell sandbox helper and finds rg.
func TestMain(m *testing.M) { testenv.Main(m, nil, testnode.Cleanup) }
