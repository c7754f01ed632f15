"""EtherCAT wire facts used by the master and the slave emulator, as tables.

Sources: ETG.1000.4 (data link layer: datagram commands and header), ETG.1000.6 (application
layer: AL states, mailbox and CoE SDO services), ETG.2010 (SII EEPROM layout and categories),
Beckhoff "EtherCAT Slave Controller Section II - Register Description" (ESC register map),
and CiA 402 / IEC 61800-7-201 (drive profile objects).
"""

from __future__ import annotations

__all__ = ["AL", "AL_STATE_NAMES", "AL_STATUS_CODES", "CIA402", "CMD", "COE", "ESC", "SII",
           "al_state_text", "al_status_text", "sdo_abort_text"]

# Datagram command codes (ETG.1000.4, table "EtherCAT command types").
CMD = {
    "NOP": 0, "APRD": 1, "APWR": 2, "APRW": 3, "FPRD": 4, "FPWR": 5, "FPRW": 6,
    "BRD": 7, "BWR": 8, "BRW": 9, "LRD": 10, "LWR": 11, "LRW": 12, "ARMW": 13, "FRMW": 14,
}

# ESC registers (Beckhoff ESC register description): name -> (address, size in bytes).
ESC = {
    "type": (0x0000, 1),
    "fmmus_supported": (0x0004, 1),
    "syncmanagers_supported": (0x0005, 1),
    "features": (0x0008, 2),  # bit 9: LRW not supported
    "station_address": (0x0010, 2),
    "dl_control": (0x0100, 4),
    "dl_status": (0x0110, 2),
    "al_control": (0x0120, 2),
    "al_status": (0x0130, 2),
    "al_status_code": (0x0134, 2),
    "eeprom_config": (0x0500, 2),
    "eeprom_control_status": (0x0502, 2),  # bits 8..10 command (1 = read), bit 15 busy
    "eeprom_address": (0x0504, 4),  # word address
    "eeprom_data": (0x0508, 8),
    "fmmu0": (0x0600, 16),  # 16 bytes per FMMU
    "sm0": (0x0800, 8),  # 8 bytes per sync manager; status byte at +5
    "dc_receive_time_port0": (0x0900, 4),  # a write latches the receive times
    "dc_system_time": (0x0910, 8),  # ns since 2000-01-01 (local time + offset)
    "dc_receive_time_ecat": (0x0918, 8),  # local time of the latch, 64 bits
    "dc_system_time_offset": (0x0920, 8),
    "dc_system_time_delay": (0x0928, 4),
}
FMMU_SIZE = 16
SM_SIZE = 8

# AL states (ETG.1000.6): AL control / AL status low nibble; bit 4 is ack (control) or error
# (status).
AL = {"INIT": 0x01, "PREOP": 0x02, "BOOT": 0x03, "SAFEOP": 0x04, "OP": 0x08, "ERROR": 0x10}

# AL state names (ETG.1000.6, AL status register 0x0130 bits 0..3; bit 4 error indication).
AL_STATE_NAMES = {0x01: "INIT", 0x02: "PRE-OP", 0x03: "BOOT", 0x04: "SAFE-OP", 0x08: "OP"}

# AL status codes (register 0x0134). Source: ETG.1000.6, table "AL Status Codes", with the
# additions of ETG.1020 (EtherCAT Protocol Enhancements), as SOEM's ec_ALstatuscodelist
# lists them. 0x8000..0xFFFF: vendor specific.
AL_STATUS_CODES = {
    0x0000: "No error",
    0x0001: "Unspecified error",
    0x0002: "No memory",
    0x0011: "Invalid requested state change",
    0x0012: "Unknown requested state",
    0x0013: "Bootstrap not supported",
    0x0014: "No valid firmware",
    0x0015: "Invalid mailbox configuration (bootstrap)",
    0x0016: "Invalid mailbox configuration",
    0x0017: "Invalid sync manager configuration",
    0x0018: "No valid inputs available",
    0x0019: "No valid outputs",
    0x001A: "Synchronization error",
    0x001B: "Sync manager watchdog",
    0x001C: "Invalid sync manager types",
    0x001D: "Invalid output configuration",
    0x001E: "Invalid input configuration",
    0x001F: "Invalid watchdog configuration",
    0x0020: "Slave needs cold start",
    0x0021: "Slave needs INIT",
    0x0022: "Slave needs PREOP",
    0x0023: "Slave needs SAFEOP",
    0x0024: "Invalid input mapping",
    0x0025: "Invalid output mapping",
    0x0026: "Inconsistent settings",
    0x0027: "Freerun not supported",
    0x0028: "Synchronization not supported",
    0x0029: "Freerun needs 3 buffer mode",
    0x002A: "Background watchdog",
    0x002B: "No valid inputs and outputs",
    0x002C: "Fatal sync error",
    0x002D: "No sync error",
    0x002E: "Invalid input FMMU configuration",
    0x0030: "Invalid DC SYNC configuration",
    0x0031: "Invalid DC latch configuration",
    0x0032: "PLL error",
    0x0033: "DC sync IO error",
    0x0034: "DC sync timeout error",
    0x0035: "DC invalid sync cycle time",
    0x0036: "DC invalid sync0 cycle time",
    0x0037: "DC invalid sync1 cycle time",
    0x0041: "MBX_AOE",
    0x0042: "MBX_EOE",
    0x0043: "MBX_COE",
    0x0044: "MBX_FOE",
    0x0045: "MBX_SOE",
    0x004F: "MBX_VOE",
    0x0050: "EEPROM no access",
    0x0051: "EEPROM error",
    0x0060: "Slave restarted locally",
    0x0061: "Device identification value updated",
    0x00F0: "Application controller available",
}

# SDO abort codes (ETG.1000.6, table "SDO Abort Codes", the CiA 301 codes): the ones a drive
# commonly answers while the master reads its mapping and scaling.
SDO_ABORT_CODES = {
    0x05030000: "Toggle bit not changed",
    0x05040000: "SDO protocol timeout",
    0x05040001: "Client/server command specifier not valid or unknown",
    0x05040005: "Out of memory",
    0x06010000: "Unsupported access to an object",
    0x06010001: "Attempt to read a write-only object",
    0x06010002: "Attempt to write a read-only object",
    0x06020000: "The object does not exist in the object dictionary",
    0x06040041: "The object can not be mapped into the PDO",
    0x06040042: "The number and length of the objects to be mapped would exceed the PDO length",
    0x06040043: "General parameter incompatibility reason",
    0x06040047: "General internal incompatibility in the device",
    0x06060000: "Access failed due to a hardware error",
    0x06070010: "Data type does not match, length of service parameter does not match",
    0x06090011: "Subindex does not exist",
    0x06090030: "Value range of parameter exceeded",
    0x08000000: "General error",
    0x08000020: "Data cannot be transferred or stored to the application",
    0x08000022: "Data cannot be transferred or stored because of the present device state",
}


def al_state_text(state: int) -> str:
    """``0x14`` -> ``"SAFE-OP + ERROR"`` (AL status register, ETG.1000.6)."""
    name = AL_STATE_NAMES.get(state & 0x0F, f"state 0x{state & 0x0F:X}")
    return f"{name} + ERROR" if state & AL["ERROR"] else name


def al_status_text(code: int) -> str:
    """The ETG.1000.6 / ETG.1020 text of an AL status code (register 0x0134)."""
    if code in AL_STATUS_CODES:
        return AL_STATUS_CODES[code]
    return f"code 0x{code:04X} not in the ETG.1000.6 table (vendor specific?)"


def sdo_abort_text(code: int) -> str:
    """The ETG.1000.6 text of an SDO abort code, or a note that it is not in the table."""
    return SDO_ABORT_CODES.get(code, "not in the ETG.1000.6 table")


# SII EEPROM word addresses and category types (ETG.2010).
SII = {
    "vendor_id": 0x0008, "product_code": 0x000A, "revision": 0x000C, "serial": 0x000E,
    "std_rx_mailbox_offset": 0x0018, "std_rx_mailbox_size": 0x0019,
    "std_tx_mailbox_offset": 0x001A, "std_tx_mailbox_size": 0x001B,
    "mailbox_protocol": 0x001C, "size": 0x003E, "version": 0x003F, "first_category": 0x0040,
    "cat_strings": 10, "cat_general": 30, "cat_fmmu": 40, "cat_syncm": 41,
    "cat_txpdo": 50, "cat_rxpdo": 51, "cat_end": 0xFFFF,
}

# CoE (ETG.1000.6): mailbox type, CoE services, SDO command specifiers, abort codes.
COE = {
    "mailbox_type_coe": 0x03, "service_sdo_request": 2, "service_sdo_response": 3,
    "upload_request": 0x40, "upload_expedited_response": 0x43,  # | (4 - size) << 2
    "download_response": 0x60, "abort": 0x80, "abort_no_object": 0x06020000,
}

# CiA 402 objects: name -> (index, subindex, type, unit).
CIA402 = {
    "controlword": (0x6040, 0, "u16", "-"),
    "statusword": (0x6041, 0, "u16", "-"),
    "position_actual": (0x6064, 0, "i32", "increments"),
    "velocity_actual": (0x606C, 0, "i32", "increments/s"),
    "torque_actual": (0x6077, 0, "i16", "per mille of rated torque"),
    "rated_torque": (0x6076, 0, "u32", "mN*m"),
    "target_position": (0x607A, 0, "i32", "increments"),
    "encoder_increments": (0x608F, 1, "u32", "increments per motor revolution(s)"),
    "motor_revolutions": (0x608F, 2, "u32", "revolutions"),
    "sm2_pdo_assign": (0x1C12, 1, "u16", "-"),
    "sm3_pdo_assign": (0x1C13, 1, "u16", "-"),
}
