// The server's budgets count persons (`SubordinateIDs`); its users configure them through this module.
@_exported import Persons
