//! Where state is read from: a trait over pagetrie's readers (a session, an
//! overlay, the committed head) and the stateless verifier's witness, so one
//! database adapter serves them all.

use pagetrie::{Db, KeyPath, Overlay, Session};

use crate::Error;

/// A key-value view of state. Reads through a [`Session`] go into its
/// witness.
pub trait Source {
    /// The value of `key`, or `None` if absent.
    fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error>;

    /// Takes a write of a block that succeeded ([`crate::StateDb::finish`]),
    /// for views that buffer writes (a session); the rest ignore it, since
    /// the adapter keeps the block's writes itself.
    fn write(&self, key: KeyPath, value: Option<Vec<u8>>) {
        let _ = (key, value);
    }

    /// A hint that `key` will be read soon.
    fn warm_up(&self, key: &KeyPath) {
        let _ = key;
    }
}

impl Source for Session {
    fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        Ok(Session::read(self, key)?)
    }

    fn write(&self, key: KeyPath, value: Option<Vec<u8>>) {
        Session::write(self, key, value)
    }

    fn warm_up(&self, key: &KeyPath) {
        Session::warm_up(self, key)
    }
}

/// A pending block's state: what sessions built on it see.
impl Source for Overlay {
    fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        Ok(Overlay::read(self, key)?)
    }
}

/// The committed head, as [`Db::read`] sees it. Each read sees the head at
/// that moment, so reads on either side of a commit see two states; a
/// [`Session`] or an [`Overlay`] gives one state throughout.
impl Source for Db {
    fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        Ok(Db::read(self, key)?)
    }
}

impl<S: Source + ?Sized> Source for &S {
    fn read(&self, key: &KeyPath) -> Result<Option<Vec<u8>>, Error> {
        (**self).read(key)
    }

    fn write(&self, key: KeyPath, value: Option<Vec<u8>>) {
        (**self).write(key, value)
    }

    fn warm_up(&self, key: &KeyPath) {
        (**self).warm_up(key)
    }
}
