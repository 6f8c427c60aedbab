package workspace

// permanentError is an error no retry can fix: the path is what it is. Its
// Permanent method is how the tool contract (tool.IsPermanent) learns that
// without this package importing it.
type permanentError string

func (e permanentError) Error() string { return string(e) }

// Permanent reports true: trying the same path again gives the same answer.
func (permanentError) Permanent() bool { return true }
