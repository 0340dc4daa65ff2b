package router

// MergeSorted exposes mergeSorted to the external tests.
func MergeSorted[T any](lists [][]T, less func(a, b T) bool, limit int) []T {
	return mergeSorted(lists, less, limit)
}
