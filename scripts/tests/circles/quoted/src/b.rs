pub struct Thing;
pub fn g() -> crate::a::Here {
    crate::a::Here
}
