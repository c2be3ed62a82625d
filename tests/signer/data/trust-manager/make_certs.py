# Made certs.pem and non-bmp.pem once (a new run makes new keys, so the
# reference stores would have to be made again; see README.md): CAs whose
# subjects exercise every rule of Go's pkix.Name.String() that trust-manager's
# aliases go through. Run with Debian's python3-cryptography in this folder.
import datetime
from cryptography import x509
from cryptography.x509.oid import NameOID, ObjectIdentifier
from cryptography.x509.name import _ASN1Type
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

key = ec.generate_private_key(ec.SECP256R1())
A = x509.NameAttribute
R = x509.RelativeDistinguishedName

def cert(name, nb, serial):
    b = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
         .serial_number(serial).not_valid_before(nb).not_valid_after(datetime.datetime(2049, 12, 31))
         .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True))
    return b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM).decode()

d = datetime.datetime
rich = x509.Name([
    R([A(NameOID.DOMAIN_COMPONENT, "com")]),
    R([A(NameOID.DOMAIN_COMPONENT, "example")]),
    R([A(NameOID.COUNTRY_NAME, "GB")]),
    R([A(NameOID.STATE_OR_PROVINCE_NAME, "England")]),
    R([A(NameOID.LOCALITY_NAME, "Zürich")]),
    R([A(NameOID.STREET_ADDRESS, "1 Road")]),
    R([A(NameOID.POSTAL_CODE, "N1 9GU")]),
    R([A(NameOID.ORGANIZATION_NAME, "Org, Inc.")]),
    R([A(NameOID.ORGANIZATION_NAME, "#second <x>;\"q\"\\")]),
    R([A(NameOID.ORGANIZATIONAL_UNIT_NAME, "b+c"), A(NameOID.ORGANIZATIONAL_UNIT_NAME, " spaced ")]),
    R([A(NameOID.COMMON_NAME, "Rich CA"), A(NameOID.SERIAL_NUMBER, "42")]),
    R([A(NameOID.EMAIL_ADDRESS, "ca@example.com")]),
    R([A(NameOID.USER_ID, "user1")]),
    R([A(NameOID.TITLE, "star*")]),
])
bmp = x509.Name([
    R([A(NameOID.ORGANIZATION_NAME, "T61 Org", _type=_ASN1Type.T61String)]),
    R([A(NameOID.COMMON_NAME, "ÜNÏCÖDÉ BMP Ça ΣΑΣ", _type=_ASN1Type.BMPString)]),
])
upper = x509.Name([
    R([A(NameOID.COMMON_NAME, "first")]),
    R([A(NameOID.COMMON_NAME, "UPPER Case CA")]),
    R([A(NameOID.ORGANIZATIONAL_UNIT_NAME, "Unit")]),
])
old = x509.Name([R([A(NameOID.COMMON_NAME, "Old CA 1965")])])
out = [cert(rich, d(2020, 1, 1), 1001), cert(bmp, d(2021, 6, 30, 12, 34, 56), 1002),
       cert(upper, d(2022, 2, 2), 1003), cert(old, d(1965, 1, 1), 1005)]
open("certs.pem", "w").write("".join(out))
emoji = x509.Name([R([A(NameOID.COMMON_NAME, "Emoji \U0001F600 CA")])])
open("non-bmp.pem", "w").write(cert(emoji, d(2024, 1, 1), 1006))
