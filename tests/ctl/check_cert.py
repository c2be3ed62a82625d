#!/usr/bin/python3
"""Checks an issued chain field by field against a signet profile.

usage: check_cert.py PROFILE CHAIN.pem ROOT.pem [IDENTITY]

Parses with Python's cryptography package (not our code), so a field we
encode wrongly shows up here even if our own parser agreed with our writer.
"""
import datetime
import sys

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID


def fail(msg):
    print(f"check_cert: {msg}", file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def load_all(path):
    """Every PEM certificate in a file, in order (cryptography 38 has no
    load_pem_x509_certificates)."""
    text = open(path, "rb").read()
    end = b"-----END CERTIFICATE-----"
    blocks = [b + end for b in text.split(end) if b"-----BEGIN CERTIFICATE-----" in b]
    return [x509.load_pem_x509_certificate(b.strip()) for b in blocks]


def main():
    profile, chain_path, root_path = sys.argv[1:4]
    identity = sys.argv[4] if len(sys.argv) > 4 else None
    chain = load_all(chain_path)
    roots = load_all(root_path)
    check(len(chain) >= 2, "chain has fewer than 2 certificates")
    check(chain[-1] == roots[-1], "chain does not end with the root bundle")
    leaf, issuer = chain[0], chain[1]
    ext = leaf.extensions

    serial = leaf.serial_number
    check(0 < serial < 2**159, "serial out of range")
    check(serial.bit_length() >= 64, "serial has fewer than 64 bits")
    check(leaf.version == x509.Version.v3, "not a v3 certificate")
    check(leaf.issuer == issuer.subject, "issuer name is not the CA's subject")
    check(leaf.not_valid_after <= issuer.not_valid_after, "leaf outlives its issuer")
    aki = ext.get_extension_for_oid(ExtensionOID.AUTHORITY_KEY_IDENTIFIER).value
    ski_ca = issuer.extensions.get_extension_for_oid(ExtensionOID.SUBJECT_KEY_IDENTIFIER).value
    check(aki.key_identifier == ski_ca.digest, "AKI does not match the CA's SKI")
    ski = ext.get_extension_for_oid(ExtensionOID.SUBJECT_KEY_IDENTIFIER).value
    check(ski.digest == x509.SubjectKeyIdentifier.from_public_key(leaf.public_key()).digest,
          "SKI is not the SHA-1 of the key")
    bc = ext.get_extension_for_oid(ExtensionOID.BASIC_CONSTRAINTS)
    check(bc.critical, "basicConstraints not critical")
    ku = ext.get_extension_for_oid(ExtensionOID.KEY_USAGE)
    check(ku.critical, "keyUsage not critical")

    if profile == "istio":
        check(len(leaf.subject) == 0, "istio leaf subject is not empty")
        san = ext.get_extension_for_oid(ExtensionOID.SUBJECT_ALTERNATIVE_NAME)
        check(san.critical, "SAN not critical with an empty subject")
        uris = san.value.get_values_for_type(x509.UniformResourceIdentifier)
        check(len(list(san.value)) == 1 and uris == [identity], f"SAN is {list(san.value)}")
        check(ku.value.digital_signature and ku.value.key_encipherment, "KU lacks DS/KE")
        check(not ku.value.key_cert_sign and not ku.value.crl_sign, "KU has CA bits")
        eku = ext.get_extension_for_oid(ExtensionOID.EXTENDED_KEY_USAGE).value
        check(set(eku) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}, "EKU")
        check(not bc.value.ca, "istio leaf is a CA")
        # now - 2 min, but never before the issuer's own NotBefore.
        want = max(datetime.datetime.utcnow() - datetime.timedelta(seconds=120), issuer.not_valid_before)
        skew = abs((leaf.not_valid_before - want).total_seconds())
        check(skew < 30, f"NotBefore {leaf.not_valid_before} is not {want} (now - 2 min, clamped)")
    elif profile == "intermediate":
        check(bc.value.ca, "intermediate is not a CA")
        check(ku.value.key_cert_sign and ku.value.crl_sign, "intermediate lacks keyCertSign/cRLSign")
    else:
        fail(f"unknown profile {profile}")
    print(f"check_cert: {profile} ok (serial {serial:x})")


main()
