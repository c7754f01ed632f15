"""EtherCAT wire facts used by the master and the slave emulator, as tables.

Sources: ETG.1000.4 (data link layer: datagram commands and header), ETG.1000.6 (application
layer: AL states, mailbox and CoE SDO services), ETG.2010 (SII EEPROM layout and categories),
Beckhoff "EtherCAT Slave Controller Section II - Register Description" (ESC register map),
and CiA 402 / IEC 61800-7-201 (drive profile objects).
"""

from __future__ import annotations

__all__ = ["AL", "CIA402", "CMD", "COE", "ESC", "SII"]

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
