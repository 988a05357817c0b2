package pkg

func A() int { return 2 }
