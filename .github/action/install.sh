#!/usr/bin/env bash
# The action's first step: sprawl-orch from the action's own checkout, in a venv of its own, and
# what the asked-for arm needs on an Ubuntu runner. Inputs arrive in the environment (never
# interpolated into a `run:` line: a workflow input is attacker-shaped text, and
# `${{ inputs.x }}` in a script is a template injection, zizmor's `template-injection`).
#
#   SPRAWL_ACTION_SOURCE  the directory to install from (the action's path)
#   SPRAWL_ACTION_ARM     auto | container | native | copied_tree | ''  (what to prepare for)
#   SPRAWL_ACTION_ENGINE  auto | docker | podman | ''
#   SPRAWL_ACTION_VENV    where the venv goes (default: $RUNNER_TEMP/sprawl-orch)
#   GITHUB_PATH           the venv's bin directory is appended to it when set
set -euo pipefail

source_dir="${SPRAWL_ACTION_SOURCE:?SPRAWL_ACTION_SOURCE: the directory to install from}"
venv="${SPRAWL_ACTION_VENV:-${RUNNER_TEMP:?RUNNER_TEMP or SPRAWL_ACTION_VENV must say where the venv goes}/sprawl-orch}"
arm="${SPRAWL_ACTION_ARM:-}"

# Root on a container job, the runner's account (passwordless sudo) on a hosted runner; an account
# with neither gets a message naming the package instead of a failed sudo prompt.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo -n "$@"
  else
    echo "sprawl-orch action: '$*' needs root, and this account has no passwordless sudo" >&2
    return 1
  fi
}

case "$arm" in
  ''|auto|native)
    if ! command -v bwrap >/dev/null; then
      echo "sprawl-orch action: installing bubblewrap for the native arm"
      as_root apt-get update -qq
      as_root apt-get install -y -qq bubblewrap
    fi
    # Ubuntu 24.04 (the default runner) refuses unprivileged user namespaces through AppArmor;
    # bwrap needs one. The knob is absent on kernels without that AppArmor patch.
    knob=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
    if [ -r "$knob" ] && [ "$(cat "$knob")" = 1 ]; then
      as_root sysctl -q -w kernel.apparmor_restrict_unprivileged_userns=0
    fi
    ;;
  container|copied_tree) ;;
  *)
    echo "sprawl-orch action: arm '$arm' is not one of auto, container, native, copied_tree" >&2
    exit 2
    ;;
esac

python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "$source_dir"
"$venv/bin/sprawl-orch" --version
if [ -n "${GITHUB_PATH:-}" ]; then
  echo "$venv/bin" >> "$GITHUB_PATH"
fi
