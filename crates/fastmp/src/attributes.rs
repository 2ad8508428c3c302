//! Communicator names and attributes (MPI_Comm_set_name, MPI_Comm_set_attr, ...): local
//! metadata of one rank's handle, shared by the handle's clones and never sent anywhere.
//!
//! MPI's keyval with its copy and delete callbacks becomes a typed [`AttrKey<T>`]: the value's
//! type is checked by the compiler, the delete callback is `T`'s `Drop` (run when the last
//! reference to the value goes), and the copy callback is one of three policies chosen when the
//! key is made ([`AttrKey::new`], [`AttrKey::cloned_on_dup`], [`AttrKey::shared_on_dup`]).

use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::comm::Comm;

/// Makes the copy of an attribute's value that [`Comm::dup`] attaches to the new communicator.
type CopyFn = fn(&Rc<dyn Any>) -> Rc<dyn Any>;

/// Key ids are unique in the process, so keys made by different thread ranks never collide.
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

/// A typed attribute key (MPI_Comm_create_keyval): values stored under it are `T`s, and
/// [`Comm::dup`] copies them or not as the key was made.
///
/// ```
/// use fastmp::AttrKey;
/// let cache = AttrKey::<Vec<u32>>::cloned_on_dup();
/// let scratch = AttrKey::<String>::new();
/// fastmp::run(2, move |world| {
///     world.set_attr(&cache, vec![1, 2, 3]);
///     world.set_attr(&scratch, "this rank only".to_string());
///     let copy = world.dup()?;
///     assert_eq!(*copy.attr(&cache).unwrap(), [1, 2, 3]);
///     assert!(copy.attr(&scratch).is_none());
///     Ok(())
/// })?;
/// # Ok::<(), fastmp::Error>(())
/// ```
pub struct AttrKey<T> {
    id: u64,
    copy: Option<CopyFn>,
    value: PhantomData<fn() -> T>,
}

impl<T> Clone for AttrKey<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for AttrKey<T> {}

impl<T> fmt::Debug for AttrKey<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttrKey").field("id", &self.id).field("copied_on_dup", &self.copy.is_some()).finish()
    }
}

impl<T: Any> AttrKey<T> {
    fn with_copy(copy: Option<CopyFn>) -> Self {
        AttrKey { id: NEXT_KEY.fetch_add(1, Ordering::Relaxed), copy, value: PhantomData }
    }

    /// A key whose values stay with their communicator: `dup` does not copy them
    /// (MPI_COMM_NULL_COPY_FN).
    pub fn new() -> Self {
        Self::with_copy(None)
    }

    /// A key whose values `dup` shares with the new communicator (the same `Rc`): a cache of
    /// something that depends only on the ranks, for instance.
    pub fn shared_on_dup() -> Self {
        Self::with_copy(Some(Rc::<dyn Any>::clone as CopyFn))
    }
}

impl<T: Any> Default for AttrKey<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Any + Clone> AttrKey<T> {
    /// A key whose values `dup` clones, so each communicator owns its own (MPI_COMM_DUP_FN).
    pub fn cloned_on_dup() -> Self {
        Self::with_copy(Some(|value| {
            let value = value.downcast_ref::<T>().expect("an attribute's value has its key's type");
            Rc::new(value.clone())
        }))
    }
}

/// One attribute: the value and its key's copy policy, which `dup` needs without the key.
struct Entry {
    value: Rc<dyn Any>,
    copy: Option<CopyFn>,
}

/// Name and attributes of a communicator handle, shared by its clones.
#[derive(Default)]
pub(crate) struct Info {
    name: RefCell<String>,
    attrs: RefCell<HashMap<u64, Entry>>,
}

impl Info {
    /// Metadata with only `name`.
    pub(crate) fn named(name: &str) -> Self {
        Info { name: RefCell::new(name.to_string()), attrs: RefCell::default() }
    }

    /// The metadata `dup` gives the new communicator: no name (as in MPI), and the attributes
    /// whose keys say so, copied. The copies are made with no borrow held, so a `Clone` that
    /// looks at the communicator's attributes does not panic.
    pub(crate) fn for_dup(&self) -> Info {
        let to_copy: Vec<(u64, Rc<dyn Any>, CopyFn)> = self
            .attrs
            .borrow()
            .iter()
            .filter_map(|(&id, entry)| entry.copy.map(|copy| (id, entry.value.clone(), copy)))
            .collect();
        let attrs = to_copy
            .into_iter()
            .map(|(id, value, copy)| (id, Entry { value: copy(&value), copy: Some(copy) }))
            .collect();
        Info { name: RefCell::default(), attrs: RefCell::new(attrs) }
    }
}

impl Comm {
    /// Names this communicator, for messages and debugging (MPI_Comm_set_name). Local; the
    /// clones of this handle see the name, communicators made from it do not.
    ///
    /// ```
    /// fastmp::run(2, |world| {
    ///     assert_eq!(world.name(), "WORLD");
    ///     let rows = world.dup()?;
    ///     assert_eq!(rows.name(), "");
    ///     rows.set_name("rows");
    ///     assert_eq!(rows.clone().name(), "rows");
    ///     Ok(())
    /// })?;
    /// # Ok::<(), fastmp::Error>(())
    /// ```
    pub fn set_name(&self, name: impl Into<String>) {
        *self.info.name.borrow_mut() = name.into();
    }

    /// This communicator's name (MPI_Comm_get_name): "WORLD" for the world communicator,
    /// empty for others until [`Comm::set_name`].
    pub fn name(&self) -> String {
        self.info.name.borrow().clone()
    }

    /// Attaches `value` under `key`, replacing (and dropping) any earlier value
    /// (MPI_Comm_set_attr). Local to this rank's handle and its clones.
    pub fn set_attr<T: Any>(&self, key: &AttrKey<T>, value: T) {
        let entry = Entry { value: Rc::new(value), copy: key.copy };
        let old = self.info.attrs.borrow_mut().insert(key.id, entry);
        // Dropped after the borrow ends: the old value's `Drop` may look at the attributes.
        drop(old);
    }

    /// The value attached under `key`, if any (MPI_Comm_get_attr).
    pub fn attr<T: Any>(&self, key: &AttrKey<T>) -> Option<Rc<T>> {
        let value = self.info.attrs.borrow().get(&key.id).map(|entry| entry.value.clone())?;
        Some(value.downcast::<T>().expect("an attribute's value has its key's type"))
    }

    /// Removes the value attached under `key` and returns it (MPI_Comm_delete_attr); it is
    /// dropped when the last `Rc` to it goes.
    pub fn delete_attr<T: Any>(&self, key: &AttrKey<T>) -> Option<Rc<T>> {
        let entry = self.info.attrs.borrow_mut().remove(&key.id)?;
        Some(entry.value.downcast::<T>().expect("an attribute's value has its key's type"))
    }
}
