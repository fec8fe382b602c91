# Helpers that run.sh, ab.sh and wakeups.sh share, sourced by them;
# cmdstat reads redis_url, set by the script.

# scratch makes tmp, a directory, and pids, an array of processes: at exit
# the processes are killed and the directory removed.
scratch() {
  tmp=$(mktemp -d)
  pids=()
  trap cleanup EXIT
}

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}

# wait_port ADDR: waits, up to 10 s, until something listens on ADDR.
wait_port() {
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $1" >&2
  return 1
}

# ticks PID: the process's utime + stime, in clock ticks (fields 14 and 15
# of /proc/PID/stat, counted after the command name's closing parenthesis).
ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }

# cmdstat FIELD CMD...: the sum of FIELD (usec, the µs spent in them; or
# calls) over the commands CMD since redis-server's start (INFO
# commandstats). Only commands sent to it: a script's calls are counted
# in the script's time and again in their own.
cmdstat() {
  local field=$1
  shift
  redis-cli -u "$redis_url" info commandstats | tr -d '\r' |
    awk -F'[:,=]' -v f="$field" -v cmds=" $* " 'index(cmds, " " substr($1, 9) " ") { for (i = 2; i < NF; i++) if ($i == f) s += $(i + 1) } END { print s + 0 }'
}

# servers_env sets srv_env, the env command every server is started with
# (never the load generators): GOMAXPROCS=$SERVERS_GOMAXPROCS when that is
# set. On cores the servers share with the loads and redis-server, Go's
# scheduler spins for work on an idle P and wakes threads to run it, and
# what that costs a server depends on how its goroutines park and wake.
servers_env() {
  srv_env=(env)
  [ -n "${SERVERS_GOMAXPROCS:-}" ] || return 0
  [[ $SERVERS_GOMAXPROCS =~ ^[1-9][0-9]{0,3}$ ]] || { echo "SERVERS_GOMAXPROCS: want a number of Ps, 1 to 9999" >&2; exit 2; }
  srv_env+=(GOMAXPROCS="$SERVERS_GOMAXPROCS")
}
