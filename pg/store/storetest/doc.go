// Package storetest is the behavioural suite that every store.Store
// implementation runs in one line, as gonum's testblas is for BLAS:
//
//	func TestSuite(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, timeout time.Duration) func() store.Store {
//			s := store.NewHashStore(store.HashStoreOptions{Timeout: timeout})
//			t.Cleanup(func() { s.Close() })
//			return func() store.Store { return s }
//		})
//	}
//
// It checks c10d's semantics: set and get, get blocking until another
// client sets the key, timeouts that wrap pg.ErrTimeout and name the key,
// add from many goroutines, compareSet, wait, delete, numKeys, and several
// clients at once. The suite never closes the stores it opens; the Factory
// does that through t.Cleanup.
package storetest
