package reducer
