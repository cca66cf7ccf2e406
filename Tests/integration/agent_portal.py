"""A desktop portal of the tests' own for `tokenctl agent`, loaded by
python3-dbusmock (`python3 -m dbusmock --template THIS_FILE`):
org.freedesktop.portal.Desktop's OpenURI answers with a request handle and
opens nothing; dbusmock keeps each call, so a test reads the URI the agent
asked to open and opens it in its own browser, as a person's portal would."""
import dbus

BUS_NAME = "org.freedesktop.portal.Desktop"
MAIN_OBJ = "/org/freedesktop/portal/desktop"
MAIN_IFACE = "org.freedesktop.portal.OpenURI"
SYSTEM_BUS = False


def load(mock, parameters):
    mock.AddMethods(MAIN_IFACE, [
        ("OpenURI", "ssa{sv}", "o", 'ret = dbus.ObjectPath("/org/freedesktop/portal/desktop/request/1_1/tokend")'),
    ])
    mock.AddProperty(MAIN_IFACE, "version", dbus.UInt32(4))
