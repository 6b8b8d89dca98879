package listen

// ChannelsForTest is how many channels the listener keeps.
func (l *Listener) ChannelsForTest() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.channels)
}
