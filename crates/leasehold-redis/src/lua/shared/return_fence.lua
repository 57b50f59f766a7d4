return fence
