package memstore_test

import (
	"testing"

	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/storetest"
)

func TestSessionStore(t *testing.T) {
	storetest.RunSessionStore(t, storetest.Features{}, func(*testing.T) storetest.Store { return memstore.New() })
}

func TestBreakers(t *testing.T) {
	storetest.RunBreakers(t, func(*testing.T) storetest.Breakers { return memstore.NewBreakers() })
}
