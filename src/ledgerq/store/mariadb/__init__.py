"""The MySQL/MariaDB driver."""

from ledgerq.store.mariadb.mariadb_driver import MariadbDriver

__all__ = ["MariadbDriver"]
