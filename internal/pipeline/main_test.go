package pipeline_test

import (
	"flag"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	flag.Parse()
	if raceEnabled {
		set := false
		flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
		if !set {
			flag.Set("rapid.checks", "15")
		}
	}
	os.Exit(m.Run())
}
