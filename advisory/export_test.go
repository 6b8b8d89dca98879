package advisory

// KeyID is the bigint of an Int64Key or StringKey, false for a PairKey: for
// tests that compare it with SQL's.
func KeyID(k Key) (int64, bool) { return k.id, !k.pair && k.assigned }
