package limiter

import "time"

// offsetFresh is how long the offset of a fast round trip is kept against
// slower ones: after it, the next round trip's offset replaces it whatever
// its duration, so a clock that steps is followed within seconds.
const offsetFresh = 10 * time.Second

// dbClock is this process's estimate of the database's clock, learned from
// each round trip: the statement's time (clock_timestamp()) against the
// midpoint of the local send and receive times. The round trip with the
// shortest duration in the last offsetFresh wins, so the estimate is off by
// at most half of it, whatever the local clock's error.
//
// The zero value knows no offset (the database's clock is taken to be the
// local one). Not safe for concurrent use.
type dbClock struct {
	offset time.Duration // database minus local
	rtt    time.Duration // of the round trip the offset came from
	at     time.Time     // local time of that round trip
	known  bool
}

// sample records a round trip sent and received at local times, whose
// statement ran at db on the database's clock.
func (c *dbClock) sample(sent, received, db time.Time) {
	if db.IsZero() || received.Before(sent) {
		return
	}
	rtt := received.Sub(sent)
	if c.known && rtt > c.rtt && received.Sub(c.at) < offsetFresh {
		return
	}
	mid := sent.Add(rtt / 2)
	c.offset, c.rtt, c.at, c.known = db.Sub(mid), rtt, received, true
}

// toDB converts a local time to the database's clock.
func (c *dbClock) toDB(local time.Time) time.Time {
	if local.IsZero() {
		return local
	}
	return local.Add(c.offset)
}

// toLocal converts a time of the database's clock to the local one.
func (c *dbClock) toLocal(db time.Time) time.Time {
	if db.IsZero() {
		return db
	}
	return db.Add(-c.offset)
}
