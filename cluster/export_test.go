package cluster

// NoWatchRestart keeps Members from starting its watch again while set, as
// when no consumer can be made (the JetStream meta leader is being elected).
func NoWatchRestart(on bool) { noWatchRestart = on }
