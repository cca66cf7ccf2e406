# tokenctl agent (issue 45), the desktop's sign-in notifier. Its tests
# (Tests/integration/test_agent.py, run by `make test` with the others) start
# a private dbus-daemon with python3-dbusmock's notification daemon on it;
# `make agent-screenshot` shows its notification on Debian's
# notification-daemon under Xvfb (docs/tokenctl-agent.png).
# busctl (systemd) asks the mocks what they were called with; xdg-open (xdg-utils) is the fallback tested.
DEPS_EXTRA += dbus python3-dbusmock systemd xdg-utils

.PHONY: agent-screenshot
# docs/tokenctl-agent.png: the notification on Debian's notification-daemon
# under Xvfb, posted by the built agent when the test server revokes a grant.
agent-screenshot: venv build
	@for p in notification-daemon xvfb imagemagick dbus python3-dbusmock; do dpkg -s $$p >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq notification-daemon xvfb imagemagick dbus python3-dbusmock >/dev/null; break; }; done
	$(PY) Tests/integration/agent_screenshot.py docs/tokenctl-agent.png
