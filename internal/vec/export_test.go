package vec

// UseF16C lets the external tests say whether the vector bodies ran.
var UseF16C = useF16C
