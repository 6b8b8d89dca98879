package main

import "context"

func (a *app) cmdDemo(ctx context.Context, args []string) error { return nil }
