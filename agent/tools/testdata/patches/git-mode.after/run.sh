#!/bin/sh
echo old
