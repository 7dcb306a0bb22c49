// Package limiter paces calls to the payment provider.
//
// Shared is the limiter the consumer uses: a token bucket with an adaptive
// rate that lives in one PostgreSQL row per limiter name (table
// rate_limiters), so every worker of every process draws from the same
// budget. Tokens are leased in small batches with one atomic UPDATE,
// penalties and rate changes are written to the row so every process honours
// them, and `reconcile limit set` (SaveSettings) reaches running processes
// within a second. The row's times (slots, penalties, the discovery's
// measurements) are on the database's clock, whose offset each process
// learns from its round trips (dbClock), so processes whose clocks disagree
// still share one budget and one Retry-After.
//
// Around the row, each process keeps pure state whose methods take the time
// and do no I/O, in the style of golang.org/x/time/rate: the leased slots and
// what to do next (local), the limit discovery that measures and probes the
// provider's rate (discovery) from the row's counts and this process's
// answers as they come, dates the accepted calls by the answers' latency
// and its jitter (latencies) and reads a window of calls from its 429s
// (windowLog), the rate-limit headers of the provider's
// answers (ParseHints, Hints, and resetBound narrowing a window's reset),
// and the database's clock (dbClock). Shared
// holds its mutex around them and carries out their answer: sleep, lease or
// write a penalty. The logic is therefore tested without sleeping; the test
// files hold a plain token bucket and AIMD rate that the row's statements are
// checked against.
//
// The package owns its tables, rate_limiters and rate_limiter_history: the
// reads for people (status, the console, `limit show`) are in read.go.
package limiter
