"""The MySQL/MariaDB driver."""

from ledgerq.store.mariadb.driver import MariadbDriver

__all__ = ["MariadbDriver"]
